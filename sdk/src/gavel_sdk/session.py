"""`RunSession`: one run reported to Gavel through a `GavelClient` (what the adapters and the
demo agent build on): admit, buffer events, hold calls and wait, finish."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gavel_sdk.client import GavelClient
from gavel_sdk.events import RunEvents, held_call
from gavel_sdk.types import Decisions, Run

DEFAULT_REJECTION = "A reviewer declined this tool call."


@dataclass(frozen=True)
class HeldCall:
    """A tool call waiting for a human, in a framework-neutral form."""

    tool_call_id: str
    tool_name: str
    arguments: Any
    reason: str = ""
    rejection_message: str = DEFAULT_REJECTION


class RunSession:
    def __init__(
        self,
        client: GavelClient,
        run_id: str,
        *,
        agent_id: str,
        principal_id: str,
        agent_version: int = 0,
        conversation_id: str | None = None,
        role_ids: list[str] | None = None,
        parent_run_id: str | None = None,
        input: Any = None,
        limits: dict | None = None,
        model: str = "unknown",
        decision_timeout: float = 900.0,
    ):
        self.client = client
        self.run_id = run_id
        self.events = RunEvents(agent_id=agent_id, model=model)
        self.decision_timeout = decision_timeout
        self._admission = {
            "agent_id": agent_id,
            "principal_id": principal_id,
            "agent_version": agent_version,
            "conversation_id": conversation_id,
            "role_ids": role_ids,
            "parent_run_id": parent_run_id,
            "input": input,
            "limits": limits,
        }
        self.run: Run | None = None

    def start(self) -> Run:
        """Admit the run (idempotent) and continue its step numbering."""
        self.run = self.client.admit_run(self.run_id, **self._admission)
        self.events.step = max(self.events.step, self.run.steps)
        return self.run

    def flush(self) -> int:
        return self.client.send_events(self.run_id, self.events.drain())

    def hold(self, calls: list[HeldCall]) -> Decisions:
        """Report the calls as held (one `approval.requested`, in request order) and wait until
        each is decided or expired; raises DecisionsTimeout after `decision_timeout`."""
        self.events.approval_requested(
            [
                held_call(
                    c.tool_call_id,
                    c.tool_name,
                    c.arguments,
                    reason=c.reason,
                    rejection_message=c.rejection_message,
                )
                for c in calls
            ]
        )
        self.flush()
        return self.client.wait_for_decisions(
            self.run_id,
            self.decision_timeout,
            tool_call_ids=[c.tool_call_id for c in calls],
            raise_on_timeout=True,
        )

    def finish(self, status: str = "done", **fields) -> int:
        self.events.finished(status, **fields)
        return self.flush()

    def fail(self, exc: BaseException) -> int:
        error = {"code": type(exc).__name__, "message": str(exc)[:2000]}
        return self.finish("failed", error=error)
