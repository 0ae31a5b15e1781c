"""LangGraph through Gavel, offline (a scripted chat model, in-process graphs) against a live
console: LangChain's HumanInTheLoopMiddleware (per-call and batched) and agent-inbox
HumanInterrupt payloads; denials reach the model, edited arguments are the ones that run."""

import json
import uuid

import pytest

pytest.importorskip("langgraph", reason="langgraph is in the sdk test extra")
pytest.importorskip("langchain", reason="langchain is in the sdk test extra")

from gavel_sdk.adapters.langgraph import GavelLangGraph  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import HumanInTheLoopMiddleware  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.types import interrupt  # noqa: E402

from tests.support.live_console import LiveConsole, ReviewerThread  # noqa: E402

DENIAL = "Bob is on leave until Monday; write to his deputy instead."
EDITED = {"to": "dave@example.com"}


class ScriptedChat(GenericFakeChatModel):
    """GenericFakeChatModel that accepts tools (create_agent binds them) and records inputs."""

    seen: list = []

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, *args, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def ai(calls=None, text="", n_in=100, n_out=10):
    return AIMessage(
        content=text,
        tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls or []],
        usage_metadata={"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out},
        response_metadata={"model_name": "scripted-lc"},
    )


def script():
    return [
        ai(
            [
                ("lookup_customer", {"name": "Bob"}, "call_lookup"),
                ("send_email", {"to": "bob@example.com"}, "call_bob"),
            ]
        ),
        ai([("send_email", {"to": "carol@example.com"}, "call_2")], n_in=120),
        ai(text="Emailed the deputy.", n_in=140),
    ]


def review(approval):
    if approval.arguments == {"to": "bob@example.com"}:
        return "deny", {"message": DENIAL}
    return "approve", {"arguments": EDITED}


def tools(sent):
    @tool
    def lookup_customer(name: str) -> str:
        """Look a customer up."""
        return f"{name}: customer since 2021"

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    return [lookup_customer, send_email]


def tool_texts(model, call_id):
    return [
        m.content
        for msgs in model.seen
        for m in msgs
        if isinstance(m, ToolMessage) and m.tool_call_id == call_id
    ]


def assert_done_in_gavel(gavel, run_id, *, steps, usage_in):
    run = gavel.get_run(run_id)
    assert run.status == "done" and run.steps == steps and run.pending_calls == []
    assert run.usage.input_tokens == usage_in and set(run.usage_by_model) == {"scripted-lc"}
    messages = json.dumps(gavel.get_state(run_id)["messages"])
    assert DENIAL in messages and "Email Bob" in messages


@pytest.mark.parametrize("mode", ["per_call", "batched"])
def test_hitl_middleware_denial_reaches_the_model_and_edits_run(gavel, reviewer, mode):
    run_id = f"run_lg_{mode}_{uuid.uuid4().hex[:8]}"
    model, sent = ScriptedChat(messages=iter(script()), seen=[]), []
    agent = create_agent(
        model,
        tools=tools(sent),
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"send_email": True}, interrupt_mode=mode)
        ],
        checkpointer=InMemorySaver(),
    )
    gavel_run = GavelLangGraph(
        gavel,
        run_id=run_id,
        agent_id="lc-support",
        principal_id=LiveConsole.PRINCIPAL,
        decision_timeout=60,
    )
    config = {"configurable": {"thread_id": run_id}}
    with ReviewerThread(reviewer, run_id, review):
        out = gavel_run.invoke(
            agent, {"messages": [{"role": "user", "content": "Email Bob"}]}, config
        )

    assert out.value["messages"][-1].content == "Emailed the deputy."
    framed = f"User rejected the tool call for `send_email` with reason: {DENIAL}"
    assert set(tool_texts(model, "call_bob")) == {framed}  # LangChain's framing, our exact text
    assert sent == ["dave@example.com"]
    # each interrupt id maps to the model's own tool call ids
    assert sorted(gavel_run.interrupt_calls.values()) == [["call_2"], ["call_bob"]]
    assert_done_in_gavel(gavel, run_id, steps=3, usage_in=360)


def inbox_graph(model, sent):
    """A hand-built graph whose tool node asks through an agent-inbox HumanInterrupt."""
    by_name = {t.name: t for t in tools(sent)}

    def call_model(state):
        return {"messages": [model.invoke(state["messages"])]}

    def run_tools(state):
        results = []
        for call in state["messages"][-1].tool_calls:
            args = call["args"]
            if call["name"] == "send_email":
                (answer,) = interrupt(
                    [
                        {
                            "action_request": {"action": call["name"], "args": args},
                            "config": {
                                "allow_ignore": True,
                                "allow_respond": True,
                                "allow_edit": True,
                                "allow_accept": True,
                            },
                            "description": "Sending email needs a human",
                        }
                    ]
                )
                if answer["type"] == "response":
                    results.append(
                        ToolMessage(answer["args"], tool_call_id=call["id"], name=call["name"])
                    )
                    continue
                if answer["type"] == "edit":
                    args = answer["args"]["args"]
            output = by_name[call["name"]].invoke(args)
            results.append(ToolMessage(output, tool_call_id=call["id"], name=call["name"]))
        return {"messages": results}

    def route(state):
        return "tools" if state["messages"][-1].tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", run_tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver())


def test_agent_inbox_interrupts_get_the_reviewers_text_verbatim(gavel, reviewer):
    run_id = f"run_lg_inbox_{uuid.uuid4().hex[:8]}"
    model, sent = ScriptedChat(messages=iter(script()), seen=[]), []
    gavel_run = GavelLangGraph(
        gavel,
        run_id=run_id,
        agent_id="lg-inbox",
        principal_id=LiveConsole.PRINCIPAL,
        decision_timeout=60,
    )
    config = {"configurable": {"thread_id": run_id}}
    with ReviewerThread(reviewer, run_id, review):
        out = gavel_run.invoke(
            inbox_graph(model, sent),
            {"messages": [{"role": "user", "content": "Email Bob"}]},
            config,
        )
    assert out.value["messages"][-1].content == "Emailed the deputy."
    assert set(tool_texts(model, "call_bob")) == {DENIAL}  # exactly the reviewer's text
    assert sent == ["dave@example.com"]
    # the inbox payload has no tool call id: the interrupt id stands for the call
    assert all(ids == [iid] for iid, ids in gavel_run.interrupt_calls.items())
    assert len(gavel_run.interrupt_calls) == 2
    run = gavel.get_run(run_id)
    assert run.status == "done" and run.steps == 3 and run.usage.input_tokens == 360
