"""pydantic-ai: Gavel decides the calls of tools marked `requires_approval=True`.

    gavel_run = GavelPydanticAI(GavelClient(url, key), run_id="run_1", agent_id="support",
                                principal_id="alice@example.com")
    result = gavel_run.run_sync(agent, "Refund order 42")   # instead of agent.run_sync(...)

The agent's output type must include `DeferredToolRequests` (e.g. `[str, DeferredToolRequests]`).
Each time a run ends with `DeferredToolRequests`, its approval calls are posted to Gavel as
held; once decided, the run continues with `DeferredToolResults`: `ToolApproved` (with the
reviewer's edited arguments as `override_args`) or `ToolDenied(message)`, where `message` is
exactly the text the reviewer left for the model. Every step, message, tool result and usage
of the run is streamed to Gavel as events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gavel_sdk.adapters import require
from gavel_sdk.session import DEFAULT_REJECTION, BudgetExceeded, Estimate, HeldCall, RunSession
from gavel_sdk.types import Decision, Usage

_pai = require("pydantic_ai", "pydantic-ai", "pydantic-ai (pydantic-ai-slim)")
_msgs = require("pydantic_ai.messages", "pydantic-ai", "pydantic-ai (pydantic-ai-slim)")

DeferredToolRequests = _pai.DeferredToolRequests
DeferredToolResults = _pai.DeferredToolResults
ToolApproved = _pai.ToolApproved
ToolDenied = _pai.ToolDenied


class UnsupportedDeferral(RuntimeError):
    """The run deferred calls for external execution (`CallDeferred`), not for approval."""


def _content(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return [
            {"type": "text", "text": v}
            if isinstance(v, str)
            else {"type": "json", "value": repr(v)}
            for v in value
        ]
    return [{"type": "json", "value": value}]


def _request_parts(events, request) -> None:
    """A ModelRequest's parts as Gavel messages and tool results (under the current step)."""
    for part in request.parts:
        if isinstance(part, _msgs.SystemPromptPart):
            events.message("system", part.content)
        elif isinstance(part, _msgs.UserPromptPart):
            events.message("user", _content(part.content))
        elif isinstance(part, _msgs.ToolReturnPart):
            text = part.model_response_str()
            failed = part.outcome in ("failed",)
            events.tool_result(part.tool_call_id, part.tool_name, text, is_error=failed)
            events.message("tool", text, tool_call_id=part.tool_call_id)
        elif isinstance(part, _msgs.RetryPromptPart):
            text = part.model_response()
            if part.tool_name:
                events.tool_result(part.tool_call_id, part.tool_name, text, is_error=True)
            events.message("tool" if part.tool_name else "user", text, tool_call_id=None)


def _response(events, response, requests: list, cost: Callable[[Any], int]) -> None:
    """A ModelResponse is one step: started, the requests it read, its assistant message,
    finished with its usage."""
    events.step_started(model=response.model_name or events.model)
    for request in requests:
        _request_parts(events, request)
    text = "".join(p.content for p in response.parts if isinstance(p, _msgs.TextPart))
    calls = [
        {"id": p.tool_call_id, "name": p.tool_name, "arguments": p.args_as_dict()}
        for p in response.parts
        if isinstance(p, _msgs.ToolCallPart)
    ]
    events.message("assistant", text, tool_calls=calls)
    usage = response.usage
    events.step_finished(
        Usage(usage.input_tokens, usage.output_tokens, int(cost(response))),
        finish_reason=getattr(response, "finish_reason", None),
    )


def messages_to_events(events, messages: list, *, cost: Callable[[Any], int]) -> None:
    """Turn pydantic-ai messages into Gavel events. A request's parts go with the step of the
    response that reads them; a trailing request (tool results before a pause) goes with the
    last step."""
    waiting: list = []
    for message in messages:
        if isinstance(message, _msgs.ModelRequest):
            waiting.append(message)
        else:
            _response(events, message, waiting, cost)
            waiting = []
    if waiting and events.step == 0:
        events.step_started()
    for request in waiting:
        _request_parts(events, request)


def held_calls(requests, *, reason: str, rejection_message: str) -> list[HeldCall]:
    if requests.calls:
        names = ", ".join(c.tool_name for c in requests.calls)
        raise UnsupportedDeferral(
            f"calls deferred for external execution ({names}) are not approvals; "
            "Gavel only decides calls of tools with requires_approval=True"
        )
    return [
        HeldCall(
            tool_call_id=c.tool_call_id,
            tool_name=c.tool_name,
            arguments=c.args_as_dict(),
            reason=(requests.metadata.get(c.tool_call_id) or {}).get("reason", reason),
            rejection_message=rejection_message,
        )
        for c in requests.approvals
    ]


def approval_result(decision: Decision, original: dict):
    """ToolApproved (with edited arguments when the reviewer changed them) or ToolDenied."""
    if decision.approved:
        edited = decision.arguments
        override = edited if isinstance(edited, dict) and edited != original else None
        return ToolApproved(override_args=override)
    return ToolDenied(decision.message or DEFAULT_REJECTION)


def deferred_results(requests, decisions) -> Any:
    originals = {c.tool_call_id: c.args_as_dict() for c in requests.approvals}
    return DeferredToolResults(
        approvals={
            call_id: approval_result(decisions[call_id], args)
            for call_id, args in originals.items()
        },
        answered_by={
            call_id: decisions[call_id].decided_by or "gavel:expired" for call_id in originals
        },
    )


def _no_cost(response) -> int:
    return 0


class GavelPydanticAI:
    """Runs a pydantic-ai agent with Gavel holding its approval-required tool calls."""

    def __init__(
        self,
        client,
        *,
        run_id: str,
        agent_id: str,
        principal_id: str,
        conversation_id: str | None = None,
        agent_version: int = 0,
        reason: str = "this tool needs a human's approval",
        rejection_message: str = DEFAULT_REJECTION,
        cost: Callable[[Any], int] = _no_cost,
        decision_timeout: float = 900.0,
        max_pauses: int = 50,
        budget_estimate: Estimate | None = None,
        budget_tokens: Estimate = 0,
    ):
        """`budget_estimate` (opt-in): before each model invocation the run's budgets are
        checked for that much (RunSession.guard_budget); refused, the run is finished with
        `usageDenied` and BudgetExceeded raised."""
        self.session = RunSession(
            client,
            run_id,
            agent_id=agent_id,
            principal_id=principal_id,
            conversation_id=conversation_id,
            agent_version=agent_version,
            decision_timeout=decision_timeout,
            budget_estimate=budget_estimate,
            budget_tokens=budget_tokens,
        )
        self.reason = reason
        self.rejection_message = rejection_message
        self.cost = cost
        self.max_pauses = max_pauses

    def run_sync(self, agent, user_prompt=None, **kwargs):
        """`agent.run_sync(user_prompt, **kwargs)`, resumed through Gavel until it is done."""
        session = self.session
        session.start()
        try:
            session.before_step()
            result = agent.run_sync(user_prompt, **kwargs)
            for _ in range(self.max_pauses):
                self._report(result)
                if not isinstance(result.output, DeferredToolRequests):
                    session.finish("done", result=_jsonable(result.output))
                    return result
                requests = result.output
                calls = held_calls(
                    requests, reason=self.reason, rejection_message=self.rejection_message
                )
                decisions = session.hold(calls)
                kwargs.pop("message_history", None)
                session.before_step()
                result = agent.run_sync(
                    message_history=result.all_messages(),
                    deferred_tool_results=deferred_results(requests, decisions),
                    **kwargs,
                )
            raise RuntimeError(f"the run paused more than {self.max_pauses} times")
        except BudgetExceeded:
            raise  # the run is finished already, with usageDenied
        except Exception as exc:
            if not isinstance(exc, KeyboardInterrupt):
                session.fail(exc)
            raise

    def _report(self, result) -> None:
        messages_to_events(self.session.events, result.new_messages(), cost=self.cost)
        self.session.flush()


def _jsonable(output: Any) -> Any:
    if isinstance(output, str | int | float | bool) or output is None:
        return {"text": output} if isinstance(output, str) else {"value": output}
    dump = getattr(output, "model_dump", None)
    return {"value": dump(mode="json")} if dump else {"text": str(output)}
