"""OpenAI Agents SDK: Gavel decides the calls of tools with `needs_approval=True`.

    gavel_run = GavelAgentsRun(GavelClient(url, key), run_id="run_1", principal_id="alice")
    result = gavel_run.run_sync(agent, "Refund order 42")   # instead of Runner.run_sync(...)

Whenever a run stops with `result.interruptions`, the calls are posted to Gavel as held; once
decided, `state.approve(item)` or `state.reject(item, rejection_message=<the reviewer's text>)`
is applied and the run resumes from `result.to_state()`.

Edited arguments are NOT supported by the Agents SDK: `RunState.approve()` runs the call with
the model's own arguments and has no way to change them. When a reviewer approves with edited
arguments, this adapter never runs the original ones: by default it rejects the call with a
message that gives the model the reviewer's arguments (so it can call again, held again) and
logs a warning; with `on_edited_arguments="raise"` it raises `EditedArgumentsUnsupported`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gavel_sdk.adapters import require
from gavel_sdk.session import DEFAULT_REJECTION, BudgetExceeded, Estimate, HeldCall, RunSession
from gavel_sdk.types import Decision, Usage

_agents = require("agents", "openai-agents", "the OpenAI Agents SDK (openai-agents)")
_items = require("agents.items", "openai-agents", "the OpenAI Agents SDK (openai-agents)")

Runner = _agents.Runner
log = logging.getLogger("gavel_sdk.openai_agents")


class EditedArgumentsUnsupported(RuntimeError):
    """A reviewer approved with edited arguments, which the Agents SDK cannot run."""


def edited_message(decision: Decision) -> str:
    return (
        "A reviewer approved this call only with different arguments: "
        f"{json.dumps(decision.arguments, sort_keys=True)}. Call the tool again with exactly "
        "these arguments if they still serve the task."
    )


def _arguments(raw) -> Any:
    text = getattr(raw, "arguments", None)
    if text is None and isinstance(raw, dict):
        text = raw.get("arguments")
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def _key(raw) -> str | None:
    if isinstance(raw, dict):
        return raw.get("call_id") or raw.get("id")
    return getattr(raw, "call_id", None) or getattr(raw, "id", None)


class _Reporter:
    """Streams a RunResult's new responses and items as Gavel events, in order. Results of a
    resumed run repeat the earlier items and responses, so it remembers how far it got."""

    def __init__(self, session: RunSession):
        self.session = session
        self.responses_done = 0
        self.items_done = 0
        self.names: dict[str, str] = {}

    def report(self, result) -> None:
        responses = list(result.raw_responses)
        owner = {_key(out): i for i, r in enumerate(responses) for out in r.output if _key(out)}
        for item in list(result.new_items)[self.items_done :]:
            self._item(item, responses, owner)
        self._responses_up_to(len(responses) - 1, responses, agent=result.last_agent)
        self.items_done = len(result.new_items)
        self.session.flush()

    def _item(self, item, responses, owner) -> None:
        events = self.session.events
        if isinstance(item, _items.ToolApprovalItem):
            return  # reported as held by the adapter
        index = owner.get(_key(item.raw_item))
        if index is not None:
            self._responses_up_to(index, responses, agent=item.agent)
        if isinstance(item, _items.ToolCallOutputItem):
            call_id = _key(item.raw_item)
            output = item.output if isinstance(item.output, str) else json.dumps(item.output)
            events.tool_result(call_id, self.names.get(call_id, "tool"), output)
            events.message("tool", output, tool_call_id=call_id)
        elif isinstance(item, _items.HandoffOutputItem):
            events.handoff(item.source_agent.name, item.target_agent.name)

    def _responses_up_to(self, index: int, responses, *, agent) -> None:
        while self.responses_done <= index:
            self._response(responses[self.responses_done], agent)
            self.responses_done += 1

    def _response(self, response, agent) -> None:
        events = self.session.events
        model = agent.model if isinstance(agent.model, str) else type(agent.model).__name__
        events.step_started(model=model, agent_id=agent.name)
        text, calls = [], []
        for out in response.output:
            kind = getattr(out, "type", None)
            if kind == "message":
                text += [c.text for c in out.content if getattr(c, "type", "") == "output_text"]
            elif kind == "function_call":
                self.names[out.call_id] = out.name
                calls.append({"id": out.call_id, "name": out.name, "arguments": _arguments(out)})
        events.message("assistant", "".join(text), tool_calls=calls)
        usage = response.usage
        events.step_finished(Usage(usage.input_tokens, usage.output_tokens, 0))


class GavelAgentsRun:
    """Runs an Agents SDK agent with Gavel holding its approval-required tool calls."""

    def __init__(
        self,
        client,
        *,
        run_id: str,
        principal_id: str,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        agent_version: int = 0,
        reason: str = "this tool needs a human's approval",
        rejection_message: str = DEFAULT_REJECTION,
        on_edited_arguments: str = "reject",
        decision_timeout: float = 900.0,
        max_pauses: int = 50,
        budget_estimate: Estimate | None = None,
        budget_tokens: Estimate = 0,
    ):
        """`budget_estimate` (opt-in): before each Runner invocation the run's budgets are
        checked for that much (RunSession.guard_budget); refused, the run is finished with
        `usageDenied` and BudgetExceeded raised."""
        if on_edited_arguments not in ("reject", "raise"):
            raise ValueError('on_edited_arguments must be "reject" or "raise"')
        self.client = client
        self.run_id = run_id
        self.admission = {
            "principal_id": principal_id,
            "agent_id": agent_id,
            "conversation_id": conversation_id,
            "agent_version": agent_version,
        }
        self.reason = reason
        self.rejection_message = rejection_message
        self.on_edited_arguments = on_edited_arguments
        self.decision_timeout = decision_timeout
        self.max_pauses = max_pauses
        self.budget = {"budget_estimate": budget_estimate, "budget_tokens": budget_tokens}
        self.session: RunSession | None = None

    def run_sync(self, agent, input, **kwargs):
        """`Runner.run_sync(agent, input, **kwargs)`, resumed through Gavel until it is done."""
        admission = {**self.admission, "agent_id": self.admission["agent_id"] or agent.name}
        session = RunSession(
            self.client,
            self.run_id,
            decision_timeout=self.decision_timeout,
            **admission,
            **self.budget,
        )
        self.session = session
        session.start()
        reporter = _Reporter(session)
        try:
            if isinstance(input, str):
                session.events.step_started(agent_id=agent.name)
                session.events.message("user", input)
                session.events.step -= 1  # the model's first response opens step 1 again
            session.before_step()
            result = Runner.run_sync(agent, input, **kwargs)
            for _ in range(self.max_pauses):
                reporter.report(result)
                if not result.interruptions:
                    session.finish("done", result={"text": str(result.final_output)})
                    return result
                state = result.to_state()
                decisions = session.hold([self._held(i) for i in result.interruptions])
                for item in result.interruptions:
                    self._apply(state, item, decisions[item.call_id])
                session.before_step()
                result = Runner.run_sync(agent, state, **kwargs)
            raise RuntimeError(f"the run paused more than {self.max_pauses} times")
        except BudgetExceeded:
            raise  # the run is finished already, with usageDenied
        except Exception as exc:
            session.fail(exc)
            raise

    def _held(self, item) -> HeldCall:
        return HeldCall(
            tool_call_id=item.call_id,
            tool_name=item.name or "tool",
            arguments=_arguments(item.raw_item),
            reason=self.reason,
            rejection_message=self.rejection_message,
        )

    def _apply(self, state, item, decision: Decision) -> None:
        if not decision.approved:
            state.reject(item, rejection_message=decision.message or self.rejection_message)
            return
        if decision.arguments is None or decision.arguments == _arguments(item.raw_item):
            state.approve(item)
            return
        if self.on_edited_arguments == "raise":
            raise EditedArgumentsUnsupported(
                f"call {item.call_id} ({item.name}) was approved with edited arguments; the "
                "OpenAI Agents SDK cannot run a call with arguments other than the model's"
            )
        log.warning(
            "call %s (%s) was approved with edited arguments, which the OpenAI Agents SDK "
            "cannot apply; rejecting it with the reviewer's arguments for the model",
            item.call_id,
            item.name,
        )
        state.reject(item, rejection_message=edited_message(decision))
