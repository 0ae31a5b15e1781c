"""`RunSession`: one run reported to Gavel through a `GavelClient` (what the adapters and the
demo agent build on): admit, buffer events, hold calls and wait, finish."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gavel_sdk.client import GavelClient
from gavel_sdk.events import RunEvents, held_call
from gavel_sdk.types import BudgetCheck, Decisions, Run

DEFAULT_REJECTION = "A reviewer declined this tool call."


@dataclass(frozen=True)
class HeldCall:
    """A tool call waiting for a human, in a framework-neutral form."""

    tool_call_id: str
    tool_name: str
    arguments: Any
    reason: str = ""
    rejection_message: str = DEFAULT_REJECTION


class BudgetExceeded(RuntimeError):
    """A budget check refused the next step (and no override was granted): the session has
    finished the run (`aborted`, finishReason `budget`, `usageDenied` naming the budget)."""

    def __init__(self, check: BudgetCheck):
        tripped = check.tripped_budget
        name = tripped.name if tripped else "a budget"
        super().__init__(f"over {name}: the next step was refused")
        self.check = check


def usage_denied(check: BudgetCheck, estimated_cost: int, estimated_tokens: int) -> dict:
    """The run's `usageDenied`: which ceiling refused how much."""
    tripped = check.tripped_budget
    denied = {"estimatedCostMinorUnits": estimated_cost, "estimatedTokens": estimated_tokens}
    if tripped is not None:
        denied.update(
            budgetId=tripped.id,
            budgetName=tripped.name,
            scope={"type": tripped.scope_type, "id": tripped.scope_id},
            ceilingMinorUnits=tripped.ceiling_minor_units,
            spentMinorUnits=tripped.spent_minor_units,
        )
    if check.approval_id:
        denied["approvalId"] = check.approval_id
    return denied


Estimate = int | Callable[[], int]


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
        budget_estimate: Estimate | None = None,
        budget_tokens: Estimate = 0,
    ):
        """`budget_estimate` (opt-in): the cost in minor units a step may take (or a function
        giving it); with it, `before_step()` checks the run's budgets (see `guard_budget`)."""
        self.client = client
        self.budget_estimate = budget_estimate
        self.budget_tokens = budget_tokens
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

    # --- budgets ---

    def before_step(self, *, waiting=None) -> BudgetCheck | None:
        """The adapters' opt-in hook: with a `budget_estimate`, `guard_budget` it before a
        step (None without one)."""
        if self.budget_estimate is None:
            return None
        cost = self.budget_estimate() if callable(self.budget_estimate) else self.budget_estimate
        tokens = self.budget_tokens() if callable(self.budget_tokens) else self.budget_tokens
        return self.guard_budget(int(cost), int(tokens), waiting=waiting)

    def guard_budget(
        self, estimated_cost: int, estimated_tokens: int = 0, *, waiting=None, asks: int = 3
    ) -> BudgetCheck:
        """Check the budgets before a step (the usage reported so far is flushed first, so it
        counts). Within budget: the check. Over an `ask` budget: wait for the lead's decision
        on the override (`waiting()`: a context manager held meanwhile, e.g. to give back a
        worker slot) and, approved, check again (which uses the grant). Refused or denied:
        finish the run (`aborted`, finishReason `budget`, `usageDenied` naming the budget)
        and raise BudgetExceeded."""
        self.flush()
        check = self.client.check_budget(self.run_id, estimated_cost, estimated_tokens)
        for _ in range(asks):
            if check.allowed or not check.approval_id:
                break
            with waiting() if waiting else contextlib.nullcontext():
                decisions = self.client.wait_for_decisions(
                    self.run_id, self.decision_timeout, after="0"
                )
            decision = next(
                (d for d in decisions.decisions.values() if d.approval_id == check.approval_id),
                None,
            )
            if decision is None or not decision.approved:
                break
            check = self.client.check_budget(self.run_id, estimated_cost, estimated_tokens)
        if check.allowed:
            return check
        self.finish(
            "aborted",
            finish_reason="budget",
            usage_denied=usage_denied(check, estimated_cost, estimated_tokens),
        )
        raise BudgetExceeded(check)
