"""OpenAI Agents SDK through Gavel, offline (agents.testing.ScriptedModel) against a live
console: the reviewer's denial text is what the model reads; an approved call runs; edited
arguments (unsupported by the Agents SDK) never run the model's original arguments."""

import json
import logging
import os
import uuid

import pytest

pytest.importorskip("agents", reason="openai-agents is in the sdk test extra")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, RunConfig, function_tool  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402
from agents.usage import Usage  # noqa: E402
from gavel_sdk import Decision  # noqa: E402
from gavel_sdk.adapters.openai_agents import (  # noqa: E402
    EditedArgumentsUnsupported,
    GavelAgentsRun,
    edited_message,
)

from tests.support.live_console import LiveConsole, ReviewerThread  # noqa: E402

DENIAL = "Bob asked not to be emailed. Offer the user a phone call instead."
OFFLINE = RunConfig(tracing_disabled=True)


def usage(n_in, n_out):
    return Usage(requests=1, input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out)


def scripted():
    return ScriptedModel(
        [
            ModelStep(
                output=[
                    function_call("lookup_customer", {"name": "Bob"}, call_id="call_lookup"),
                    function_call("send_email", {"to": "bob@example.com"}, call_id="call_bob"),
                ],
                usage=usage(100, 10),
            ),
            ModelStep(
                output=[function_call("send_email", {"to": "carol@example.com"}, call_id="call_2")],
                usage=usage(120, 12),
            ),
            ModelStep(output=[assistant_message("Emailed Carol.")], usage=usage(140, 8)),
        ]
    )


def support_agent(model, sent):
    @function_tool
    def lookup_customer(name: str) -> str:
        return f"{name}: customer since 2021"

    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    return Agent(name="agents-support", model=model, tools=[lookup_customer, send_email])


def outputs_seen(model, call_id):
    return [
        item["output"]
        for call in model.calls
        if isinstance(call.input, list)
        for item in call.input
        if isinstance(item, dict)
        and item.get("type") == "function_call_output"
        and item.get("call_id") == call_id
    ]


def test_denial_text_reaches_the_model_and_an_approved_call_runs(gavel, reviewer):
    run_id = f"run_oa_{uuid.uuid4().hex[:8]}"
    model, sent = scripted(), []

    def review(approval):
        if approval.arguments == {"to": "bob@example.com"}:
            return "deny", {"message": DENIAL}
        return "approve", {}

    gavel_run = GavelAgentsRun(
        gavel, run_id=run_id, principal_id=LiveConsole.PRINCIPAL, decision_timeout=60
    )
    with ReviewerThread(reviewer, run_id, review):
        result = gavel_run.run_sync(support_agent(model, sent), "Email Bob", run_config=OFFLINE)

    assert result.final_output == "Emailed Carol."
    assert set(outputs_seen(model, "call_bob")) == {DENIAL}
    assert sent == ["carol@example.com"]
    run = gavel.get_run(run_id)
    assert run.status == "done" and run.steps == 3 and run.agent_id == "agents-support"
    assert (run.usage.input_tokens, run.usage.output_tokens) == (360, 30)
    messages = gavel.get_state(run_id)["messages"]
    assert DENIAL in json.dumps(messages) and "Email Bob" in json.dumps(messages)


def test_edited_arguments_are_never_run_as_the_models_originals(gavel, reviewer, caplog):
    run_id = f"run_oa_edit_{uuid.uuid4().hex[:8]}"
    edited = {"to": "dave@example.com"}
    model = ScriptedModel(
        [
            ModelStep(
                output=[function_call("send_email", {"to": "bob@example.com"}, call_id="c1")]
            ),
            ModelStep(output=[assistant_message("Understood.")]),
        ]
    )
    sent = []
    gavel_run = GavelAgentsRun(
        gavel, run_id=run_id, principal_id=LiveConsole.PRINCIPAL, decision_timeout=60
    )
    script = lambda a: ("approve", {"arguments": edited})  # noqa: E731
    with (
        ReviewerThread(reviewer, run_id, script) as rev,
        caplog.at_level(logging.WARNING, logger="gavel_sdk.openai_agents"),
    ):
        gavel_run.run_sync(support_agent(model, sent), "Email Bob", run_config=OFFLINE)
    assert sent == []  # bob's address never went out
    assert outputs_seen(model, "c1") == [
        edited_message(Decision("apr", "c1", "approved", None, edited, None, None))
    ]
    assert "edited arguments" in caplog.text and rev.decided[0].status == "approved"
    assert gavel.get_run(run_id).status == "done"


def test_edited_arguments_can_raise_instead(gavel, reviewer):
    run_id = f"run_oa_raise_{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(
        [ModelStep(output=[function_call("send_email", {"to": "bob@example.com"}, call_id="c1")])]
    )
    gavel_run = GavelAgentsRun(
        gavel,
        run_id=run_id,
        principal_id=LiveConsole.PRINCIPAL,
        on_edited_arguments="raise",
        decision_timeout=60,
    )
    script = lambda a: ("approve", {"arguments": {"to": "x@example.com"}})  # noqa: E731
    with ReviewerThread(reviewer, run_id, script), pytest.raises(EditedArgumentsUnsupported):
        gavel_run.run_sync(support_agent(model, []), "Email Bob", run_config=OFFLINE)
    run = gavel.get_run(run_id)
    assert run.status == "failed" and run.error["code"] == "EditedArgumentsUnsupported"
