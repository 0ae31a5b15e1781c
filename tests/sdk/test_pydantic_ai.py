"""pydantic-ai through Gavel, offline (FunctionModel) against a live console: a denial's
message reaches the model verbatim, an approval's edited arguments are the ones the tool runs."""

import uuid

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the sdk test extra")

from gavel_sdk.adapters.pydantic_ai import GavelPydanticAI  # noqa: E402
from pydantic_ai import Agent, DeferredToolRequests  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

from tests.support.live_console import LiveConsole, ReviewerThread  # noqa: E402

DENIAL = "Do not email Bob: he unsubscribed on 1 Dec. Ask the user instead."


def scripted_agent(seen: list, sent: list):
    """Step 1 calls an unheld tool and a held one; after the denial, step 2 tries again with
    another address; step 3 answers."""

    def model(messages, info):
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        seen[:] = returns
        responses = sum(isinstance(m, ModelResponse) for m in messages)
        usage = RequestUsage(input_tokens=100 + responses, output_tokens=20)
        if responses == 0:
            parts = [
                ToolCallPart("lookup_customer", {"name": "Bob"}, tool_call_id="call_lookup"),
                ToolCallPart("send_email", {"to": "bob@example.com"}, tool_call_id="call_bob"),
            ]
        elif responses == 1:
            parts = [ToolCallPart("send_email", {"to": "carol@example.com"}, tool_call_id="call_2")]
        else:
            parts = [TextPart("Emailed the right person.")]
        return ModelResponse(parts=parts, usage=usage, model_name="scripted-1")

    agent = Agent(
        FunctionModel(model, model_name="scripted-1"), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain
    def lookup_customer(name: str) -> str:
        return f"{name}: customer since 2021"

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    return agent


def review(approval):
    if approval.arguments == {"to": "bob@example.com"}:
        return "deny", {"message": DENIAL}
    return "approve", {"arguments": {"to": "dave@example.com"}}


def test_denial_text_reaches_the_model_and_edited_arguments_run(gavel, reviewer, live_console):
    run_id = f"run_pai_{uuid.uuid4().hex[:8]}"
    seen, sent = [], []
    gavel_run = GavelPydanticAI(
        gavel,
        run_id=run_id,
        agent_id="pai-support",
        principal_id=LiveConsole.PRINCIPAL,
        conversation_id="conv_pai",
        decision_timeout=60,
    )
    with ReviewerThread(reviewer, run_id, review) as rev:
        result = gavel_run.run_sync(scripted_agent(seen, sent), "Email Bob the invoice")

    assert result.output == "Emailed the right person."
    denial = next(p for p in _all_returns(result) if p.tool_call_id == "call_bob")
    assert denial.model_response_str() == DENIAL
    assert sent == ["dave@example.com"]  # never bob, and carol was edited to dave
    assert [a.status for a in rev.decided] == ["denied", "approved"]

    run = gavel.get_run(run_id)
    assert run.status == "done" and run.steps == 3 and run.pending_calls == []
    assert run.usage.input_tokens == 100 + 101 + 102 and run.usage.output_tokens == 60
    assert set(run.usage_by_model) == {"scripted-1"}
    state = gavel.get_state(run_id)
    contents = [m.get("content") for m in state["messages"]]
    assert "Email Bob the invoice" in str(contents) and DENIAL in str(contents)


def _all_returns(result):
    return [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
