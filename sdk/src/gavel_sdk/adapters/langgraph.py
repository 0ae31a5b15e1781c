"""LangGraph (and LangChain agents): Gavel answers a graph's `interrupt()`s.

    gavel_run = GavelLangGraph(GavelClient(url, key), run_id="run_1", agent_id="support",
                               principal_id="alice@example.com")
    out = gavel_run.invoke(graph, {"messages": [...]}, config)   # instead of graph.invoke(...)

Understood interrupt payloads, each held call keeping its interrupt id ↔ tool call id mapping:

- LangChain's `HumanInTheLoopMiddleware`, `interrupt_mode="per_call"` (a `ToolApprovalRequest`
  per call, answered by interrupt id with one decision) and `"batched"` (a `HITLRequest` with
  `action_requests`, answered with `{"decisions": [...]}` by position; tool call ids are read
  from the last AI message's tool calls). Approve → `approve`, approve with edited arguments →
  `edit`, deny/expiry → `reject` with the reviewer's message. LangChain frames a rejection for
  the model as "User rejected the tool call for `NAME` with reason: MESSAGE".
- agent-inbox `HumanInterrupt` (`{"action_request": {"action", "args"}, "config", "description"}`,
  alone or in a list), answered with `HumanResponse`: `accept`, `edit` (edited args),
  `response` (the reviewer's message verbatim; `ignore` when the interrupt disallows responses).

The graph needs a checkpointer; the run resumes with `Command(resume={interrupt_id: ...})`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gavel_sdk.adapters import require
from gavel_sdk.session import DEFAULT_REJECTION, BudgetExceeded, Estimate, HeldCall, RunSession
from gavel_sdk.types import Decision, Decisions, Usage

_types = require("langgraph.types", "langgraph", "LangGraph (langgraph)")
_lc_messages = require("langchain_core.messages", "langgraph", "LangChain core (langchain-core)")

Command = _types.Command


class UnsupportedInterrupt(ValueError):
    """An interrupt whose payload is none of the shapes this adapter answers."""


@dataclass
class PendingInterrupt:
    """One interrupt and the held calls it stands for (in its own order)."""

    interrupt_id: str
    shape: str  # per_call | batched | inbox | inbox_list
    calls: list[HeldCall]
    configs: list[dict] = field(default_factory=list)


def _is_inbox(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("action_request"), dict)


def _last_ai_tool_calls(messages: list) -> list[dict]:
    for message in reversed(messages or []):
        if isinstance(message, _lc_messages.AIMessage):
            return list(message.tool_calls or [])
    return []


def read_interrupt(interrupt, messages: list, *, reason: str, rejection: str) -> PendingInterrupt:
    """The held calls of one interrupt, with the tool call ids they map to."""
    value, iid = interrupt.value, interrupt.id

    def held(call_id, name, args, description=None):
        return HeldCall(
            call_id, name, args, reason=description or reason, rejection_message=rejection
        )

    if isinstance(value, dict) and value.get("type") == "tool_approval":
        call = held(
            value["tool_call_id"], value["name"], value.get("args"), value.get("description")
        )
        return PendingInterrupt(iid, "per_call", [call])
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        requests = value["action_requests"]
        names = {r["name"] for r in requests}
        ids = [c["id"] for c in _last_ai_tool_calls(messages) if c["name"] in names]
        if len(ids) != len(requests):
            ids = [f"{iid}:{k}" for k in range(len(requests))]
        calls = [
            held(cid, r["name"], r.get("args"), r.get("description"))
            for cid, r in zip(ids, requests, strict=True)
        ]
        return PendingInterrupt(iid, "batched", calls)
    if _is_inbox(value) or (isinstance(value, list) and value and all(map(_is_inbox, value))):
        items = value if isinstance(value, list) else [value]
        calls = [
            held(
                item.get("tool_call_id") or (iid if len(items) == 1 else f"{iid}:{k}"),
                item["action_request"]["action"],
                item["action_request"].get("args"),
                item.get("description"),
            )
            for k, item in enumerate(items)
        ]
        shape = "inbox_list" if isinstance(value, list) else "inbox"
        return PendingInterrupt(iid, shape, calls, [i.get("config") or {} for i in items])
    raise UnsupportedInterrupt(
        f"interrupt {iid} has a payload this adapter does not answer: {type(value).__name__} "
        "(expected a HumanInTheLoopMiddleware request or an agent-inbox HumanInterrupt)"
    )


def _edited(decision: Decision, call: HeldCall) -> bool:
    return decision.arguments is not None and decision.arguments != call.arguments


def hitl_decision(decision: Decision, call: HeldCall) -> dict:
    if not decision.approved:
        return {"type": "reject", "message": decision.message or call.rejection_message}
    if _edited(decision, call):
        return {
            "type": "edit",
            "edited_action": {"name": call.tool_name, "args": decision.arguments},
        }
    return {"type": "approve"}


def inbox_response(decision: Decision, call: HeldCall, config: dict) -> dict:
    if not decision.approved:
        if config.get("allow_respond", True):
            return {"type": "response", "args": decision.message or call.rejection_message}
        return {"type": "ignore", "args": None}
    if _edited(decision, call):
        return {"type": "edit", "args": {"action": call.tool_name, "args": decision.arguments}}
    return {"type": "accept", "args": None}


def resume_value(pending: PendingInterrupt, decisions: Decisions) -> Any:
    """The value that answers one interrupt, from Gavel's decisions of its calls."""
    got = [decisions[c.tool_call_id] for c in pending.calls]
    if pending.shape == "per_call":
        return hitl_decision(got[0], pending.calls[0])
    if pending.shape == "batched":
        return {"decisions": [hitl_decision(d, c) for d, c in zip(got, pending.calls, strict=True)]}
    answers = [
        inbox_response(d, c, cfg)
        for d, c, cfg in zip(got, pending.calls, pending.configs, strict=True)
    ]
    return answers if pending.shape == "inbox_list" else answers[0]


def _text(content: Any) -> Any:
    if isinstance(content, str):
        return content
    return [
        {"type": "text", "text": p["text"]}
        if isinstance(p, dict) and p.get("type") == "text"
        else {"type": "json", "value": p}
        for p in content or []
    ]


class _Reporter:
    """Streams a graph's messages (by id, each once) as steps, messages and tool results."""

    def __init__(self, session: RunSession, model: str):
        self.session = session
        self.model = model
        self.seen: set[str] = set()
        self.names: dict[str, str] = {}

    def report(self, messages: list) -> None:
        events = self.session.events
        for message in messages or []:
            key = message.id or str(id(message))
            if key in self.seen:
                continue
            self.seen.add(key)
            if isinstance(message, _lc_messages.AIMessage):
                self._ai(message)
            elif isinstance(message, _lc_messages.ToolMessage):
                name = message.name or self.names.get(message.tool_call_id, "tool")
                is_error = getattr(message, "status", "success") == "error"
                content = _text(message.content)
                events.tool_result(message.tool_call_id, name, content, is_error=is_error)
                events.message("tool", content, tool_call_id=message.tool_call_id)
            elif isinstance(message, _lc_messages.SystemMessage):
                events.message("system", _text(message.content))
            else:
                events.message("user", _text(message.content))
        self.session.flush()

    def _ai(self, message) -> None:
        events = self.session.events
        meta = message.response_metadata or {}
        model = meta.get("model_name") or meta.get("model") or self.model
        events.step_started(model=model)
        calls = [
            {"id": c["id"], "name": c["name"], "arguments": c.get("args")}
            for c in message.tool_calls or []
        ]
        for c in calls:
            self.names[c["id"]] = c["name"]
        events.message("assistant", _text(message.content), tool_calls=calls)
        usage = message.usage_metadata or {}
        events.step_finished(
            Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)), 0),
            finish_reason=meta.get("finish_reason"),
        )


class GavelLangGraph:
    """Invokes a LangGraph graph with Gavel answering its approval interrupts."""

    def __init__(
        self,
        client,
        *,
        run_id: str,
        agent_id: str,
        principal_id: str,
        conversation_id: str | None = None,
        agent_version: int = 0,
        model: str = "unknown",
        messages_key: str = "messages",
        reason: str = "this tool needs a human's approval",
        rejection_message: str = DEFAULT_REJECTION,
        decision_timeout: float = 900.0,
        max_pauses: int = 50,
        budget_estimate: Estimate | None = None,
        budget_tokens: Estimate = 0,
    ):
        """`budget_estimate` (opt-in): before each graph invocation the run's budgets are
        checked for that much (RunSession.guard_budget); refused, the run is finished with
        `usageDenied` and BudgetExceeded raised."""
        self.session = RunSession(
            client,
            run_id,
            agent_id=agent_id,
            principal_id=principal_id,
            conversation_id=conversation_id,
            agent_version=agent_version,
            model=model,
            decision_timeout=decision_timeout,
            budget_estimate=budget_estimate,
            budget_tokens=budget_tokens,
        )
        self.reporter = _Reporter(self.session, model)
        self.messages_key = messages_key
        self.reason = reason
        self.rejection_message = rejection_message
        self.max_pauses = max_pauses
        self.interrupt_calls: dict[str, list[str]] = {}  # interrupt id -> tool call ids

    def invoke(self, graph, input, config, **kwargs):
        """`graph.invoke(input, config, version="v2")`, resumed until no interrupt is left;
        returns the final `GraphOutput`."""
        session = self.session
        session.start()
        try:
            session.before_step()
            out = graph.invoke(input, config, version="v2", **kwargs)
            for _ in range(self.max_pauses):
                messages = self._messages(out.value)
                self.reporter.report(messages)
                if not out.interrupts:
                    session.finish("done", result={"text": self._final_text(messages)})
                    return out
                resume = self._resume(out.interrupts, messages)
                session.before_step()
                out = graph.invoke(resume, config, version="v2", **kwargs)
            raise RuntimeError(f"the graph paused more than {self.max_pauses} times")
        except BudgetExceeded:
            raise  # the run is finished already, with usageDenied
        except Exception as exc:
            session.fail(exc)
            raise

    def _resume(self, interrupts, messages):
        pending = [
            read_interrupt(i, messages, reason=self.reason, rejection=self.rejection_message)
            for i in interrupts
        ]
        for p in pending:
            self.interrupt_calls[p.interrupt_id] = [c.tool_call_id for c in p.calls]
        decisions = self.session.hold([c for p in pending for c in p.calls])
        return Command(resume={p.interrupt_id: resume_value(p, decisions) for p in pending})

    def _messages(self, value) -> list:
        return value.get(self.messages_key, []) if isinstance(value, dict) else []

    @staticmethod
    def _final_text(messages: list) -> str | None:
        for message in reversed(messages):
            if isinstance(message, _lc_messages.AIMessage) and isinstance(message.content, str):
                return message.content
        return None
