"""Typed results: the contract's resources as dataclasses (snake_case), built from the wire.

Each keeps the whole wire body in `.raw`, so a field added to the contract later is readable
before the SDK names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_minor_units: int = 0

    @classmethod
    def from_wire(cls, body: dict | None) -> Usage:
        body = body or {}
        return cls(
            input_tokens=int(body.get("inputTokens", 0)),
            output_tokens=int(body.get("outputTokens", 0)),
            cost_minor_units=int(body.get("costMinorUnits", 0)),
        )

    def to_wire(self) -> dict:
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "costMinorUnits": self.cost_minor_units,
        }


@dataclass(frozen=True)
class Approval:
    id: str
    run_id: str
    step: int | None
    tool_call_id: str
    tool_name: str
    arguments: Any
    reason: str
    rejection_message: str
    status: str
    decided_by: str | None
    message: str | None
    sub_run_tool_call_id: str | None = None
    requested_at: str | None = None
    expires_at: str | None = None
    decided_at: str | None = None
    decided_by_rule: str | None = None  # a lasting rule's id, when one decided it
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, body: dict) -> Approval:
        return cls(
            id=body["id"],
            run_id=body["runId"],
            step=body.get("step"),
            tool_call_id=body["toolCallId"],
            tool_name=body["toolName"],
            arguments=body.get("arguments"),
            reason=body.get("reason", ""),
            rejection_message=body.get("rejectionMessage", ""),
            status=body["status"],
            decided_by=body.get("decidedBy"),
            message=body.get("message"),
            sub_run_tool_call_id=body.get("subRunToolCallId"),
            requested_at=body.get("requestedAt"),
            expires_at=body.get("expiresAt"),
            decided_at=body.get("decidedAt"),
            decided_by_rule=body.get("decidedByRule"),
            raw=body,
        )


@dataclass(frozen=True)
class Run:
    id: str
    agent_id: str
    agent_version: int
    current_agent_id: str
    principal_id: str | None
    conversation_id: str | None
    parent_run_id: str | None
    status: str
    usage: Usage
    usage_by_model: dict[str, Usage]
    steps: int
    last_seq: int
    todos: list[dict]
    verdicts: dict[str, dict]
    pending_calls: list[Approval]
    result: Any
    finish_reason: str | None
    error: dict | None
    started_at: str | None
    finished_at: str | None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "aborted", "failed")

    @classmethod
    def from_wire(cls, body: dict) -> Run:
        return cls(
            id=body["id"],
            agent_id=body["agentId"],
            agent_version=int(body.get("agentVersion", 0)),
            current_agent_id=body.get("currentAgentId", body["agentId"]),
            principal_id=body.get("principalId"),
            conversation_id=body.get("conversationId"),
            parent_run_id=body.get("parentRunId"),
            status=body["status"],
            usage=Usage.from_wire(body.get("usage")),
            usage_by_model={
                k: Usage.from_wire(v) for k, v in (body.get("usageByModel") or {}).items()
            },
            steps=int(body.get("steps", 0)),
            last_seq=int(body.get("lastSeq", 0)),
            todos=list(body.get("todos") or []),
            verdicts=dict(body.get("verdicts") or {}),
            pending_calls=[Approval.from_wire(a) for a in body.get("pendingCalls") or []],
            result=body.get("result"),
            finish_reason=body.get("finishReason"),
            error=body.get("error"),
            started_at=body.get("startedAt"),
            finished_at=body.get("finishedAt"),
            raw=body,
        )


@dataclass(frozen=True)
class RunPage:
    items: list[Run]
    next_cursor: str | None


@dataclass(frozen=True)
class ApprovalPage:
    items: list[Approval]
    next_cursor: str | None


@dataclass(frozen=True)
class Decision:
    """One decided call. For a denial or an expiry `message` is what the model reads; for an
    approval `arguments` are the ones to run (a reviewer may have edited them)."""

    approval_id: str
    tool_call_id: str
    decision: str  # approved | denied | expired
    message: str | None
    arguments: Any
    decided_by: str | None
    decided_at: str | None
    decided_by_rule: str | None = None  # a lasting rule's id, when one decided it

    @property
    def approved(self) -> bool:
        return self.decision == "approved"

    @classmethod
    def from_wire(cls, body: dict) -> Decision:
        return cls(
            approval_id=body["approvalId"],
            tool_call_id=body["toolCallId"],
            decision=body["decision"],
            message=body.get("message"),
            arguments=body.get("arguments"),
            decided_by=body.get("decidedBy"),
            decided_at=body.get("decidedAt"),
            decided_by_rule=body.get("decidedByRule"),
        )


@dataclass(frozen=True)
class Decisions:
    """What `wait_for_decisions` gathered: every decision seen (by tool call id), the calls
    still pending, and the cursor to replay from."""

    complete: bool
    decisions: dict[str, Decision]
    pending: list[str]
    cursor: str

    def __getitem__(self, tool_call_id: str) -> Decision:
        return self.decisions[tool_call_id]

    def get(self, tool_call_id: str) -> Decision | None:
        return self.decisions.get(tool_call_id)


@dataclass(frozen=True)
class BudgetEntry:
    """One ceiling a budget check measured: the run's own limit (`id` None, scope type
    "run") or a budget, with its spend and whether the estimate fits under it."""

    id: str | None
    name: str
    scope_type: str  # run | agent | principal | team | tenant
    scope_id: str | None
    period: str | None
    ceiling_minor_units: int
    spent_minor_units: int
    remaining_minor_units: int
    ceiling_tokens: int | None
    spent_tokens: int
    allowed: bool

    @classmethod
    def from_wire(cls, body: dict) -> BudgetEntry:
        scope = body.get("scope") or {}
        return cls(
            id=body.get("id"),
            name=body["name"],
            scope_type=scope.get("type", ""),
            scope_id=scope.get("id"),
            period=body.get("period"),
            ceiling_minor_units=int(body["ceilingMinorUnits"]),
            spent_minor_units=int(body["spentMinorUnits"]),
            remaining_minor_units=int(body["remainingMinorUnits"]),
            ceiling_tokens=body.get("ceilingTokens"),
            spent_tokens=int(body.get("spentTokens", 0)),
            allowed=bool(body["allowed"]),
        )


@dataclass(frozen=True)
class BudgetCheck:
    """The answer of `check_budget`: `allowed`, every ceiling narrowest first, the first one
    the estimate trips, and, over an `ask` budget, the override approval asked for
    (`approval_id`) or the approved one this check used up (`override_approval_id`)."""

    allowed: bool
    budgets: list[BudgetEntry]
    tripped_budget: BudgetEntry | None
    approval_id: str | None
    override_approval_id: str | None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, body: dict) -> BudgetCheck:
        tripped = body.get("trippedBudget")
        return cls(
            allowed=bool(body["allowed"]),
            budgets=[BudgetEntry.from_wire(b) for b in body.get("budgets") or []],
            tripped_budget=BudgetEntry.from_wire(tripped) if tripped else None,
            approval_id=body.get("approvalId"),
            override_approval_id=body.get("overrideApprovalId"),
            raw=body,
        )
