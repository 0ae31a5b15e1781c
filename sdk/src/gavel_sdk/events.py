"""Event builders: the contract's event types as plain dicts (the client adds `seq`).

`RunEvents` keeps a buffer of a run's events and its step counter; send them with
`client.send_events(run_id, events.drain())`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gavel_sdk.types import Usage


def now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def message(role: str, content: Any, *, tool_calls=None, tool_call_id=None) -> dict:
    body: dict[str, Any] = {"role": role, "content": content}
    if tool_calls:
        body["toolCalls"] = [
            {"id": c["id"], "name": c["name"], "arguments": c.get("arguments")} for c in tool_calls
        ]
    if tool_call_id:
        body["toolCallId"] = tool_call_id
    return body


def held_call(
    tool_call_id: str,
    tool_name: str,
    arguments: Any,
    *,
    reason: str = "",
    rejection_message: str = "",
    sub_run_tool_call_id: str | None = None,
    expires_at: str | None = None,
) -> dict:
    """One call of an `approval.requested` event."""
    call = {
        "toolCallId": tool_call_id,
        "toolName": tool_name,
        "arguments": arguments,
        "reason": reason,
        "rejectionMessage": rejection_message,
    }
    if sub_run_tool_call_id:
        call["subRunToolCallId"] = sub_run_tool_call_id
    if expires_at:
        call["expiresAt"] = expires_at
    return call


class RunEvents:
    """A run's outgoing events. Steps are numbered from 1 by `step_started`."""

    def __init__(self, *, agent_id: str, model: str = "unknown", step: int = 0):
        self.agent_id = agent_id
        self.model = model
        self.step = step
        self._buffer: list[dict] = []

    def _add(self, type_: str, **fields) -> dict:
        event = {
            "type": type_,
            "at": now_iso(),
            **{k: v for k, v in fields.items() if v is not None},
        }
        self._buffer.append(event)
        return event

    def drain(self) -> list[dict]:
        events, self._buffer = self._buffer, []
        return events

    def __len__(self) -> int:
        return len(self._buffer)

    def step_started(self, *, model: str | None = None, agent_id: str | None = None) -> int:
        self.step += 1
        self.model = model or self.model
        self._add(
            "step.started", step=self.step, agentId=agent_id or self.agent_id, model=self.model
        )
        return self.step

    def message(self, role: str, content: Any, *, tool_calls=None, tool_call_id=None) -> dict:
        body = message(role, content, tool_calls=tool_calls, tool_call_id=tool_call_id)
        return self._add("message", step=max(self.step, 1), message=body)

    def tool_result(self, tool_call_id: str, tool_name: str, result: Any, *, is_error=False):
        return self._add(
            "tool.result",
            step=max(self.step, 1),
            toolCallId=tool_call_id,
            toolName=tool_name,
            result=result,
            isError=bool(is_error),
        )

    def step_finished(
        self,
        usage: Usage,
        *,
        finish_reason: str | None = None,
        trace_id: str | None = None,
        model: str | None = None,
    ) -> dict:
        return self._add(
            "step.finished",
            step=max(self.step, 1),
            usage=usage.to_wire(),
            model=model or self.model,
            finishReason=finish_reason,
            traceId=trace_id,
        )

    def approval_requested(self, calls: list[dict]) -> dict:
        if not calls:
            raise ValueError("approval.requested needs at least one call")
        return self._add("approval.requested", step=max(self.step, 1), calls=calls)

    def handoff(self, from_agent_id: str, to_agent_id: str, *, child_run_id: str | None = None):
        return self._add(
            "handoff",
            step=max(self.step, 1),
            fromAgentId=from_agent_id,
            toAgentId=to_agent_id,
            childRunId=child_run_id,
        )

    def handoff_returned(self, to_agent_id: str) -> dict:
        return self._add("handoff.returned", step=max(self.step, 1), toAgentId=to_agent_id)

    def todos(self, todos: list[dict]) -> dict:
        return self._add("todos.updated", todos=todos)

    def verdict(self, turn: str, verdict: str, *, guard: str, reason: str) -> dict:
        return self._add("verdict", turn=turn, verdict=verdict, guard=guard, reason=reason)

    def finished(
        self,
        status: str = "done",
        *,
        result: Any = None,
        finish_reason: str | None = None,
        ended_by_tool: str | None = None,
        error: dict | None = None,
        usage_denied: dict | None = None,
    ) -> dict:
        return self._add(
            "run.finished",
            status=status,
            result=result,
            finishReason=finish_reason,
            endedByTool=ended_by_tool,
            error=error,
            usageDenied=usage_denied,
        )
