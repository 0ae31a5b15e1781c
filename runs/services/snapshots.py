"""RunState snapshots in: the console reconciles the run it holds to a whole state, in one
transaction, through the same write primitives as the event API (runs/services/common.py).

An identical PUT is found by digests before anything else is read or written (the request
body's, before validation; else the validated state's), so it is cheap and publishes nothing.

`run.snapshot` holds an envelope, read only here and in runs/selectors_state.py:
`{"state": <wire RunState or null>, "lastSeq": <run.last_seq when stored>, "outcomes": [...]}`
(the state is the run's truth for GET .../state only while no event or outcome came after it;
`outcomes` are the digests of the IRunOutcome bodies applied, see outcomes.py).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from approvals.models import Approval, ApprovalStatus
from approvals.services.requests import approvals_request
from console import realtime
from console.errors import Conflict, Invalid
from console.models import Tenant
from runs.models import Handoff, Message, Run, RunStatus, Verdict
from runs.schemas_state import (
    RunStateIn,
    bad_string_path,
    run_state_problems,
    wire_text_problem,
)
from runs.selectors_state import snapshot_envelope
from runs.services import common
from runs.services.common import USAGE_FIELDS, RunWrites, StepRow, usage_zero

STATUS_FROM_STATE = {
    "running": RunStatus.RUNNING,
    "awaiting_approval": RunStatus.AWAITING_APPROVAL,
    "completed": RunStatus.DONE,
    "failed": RunStatus.FAILED,
    "aborted": RunStatus.ABORTED,
}
RUN_RELATED = ("tenant", "principal", "agent", "conversation")


# --- the entry point ---


def run_state_put_body(*, tenant: Tenant, run_id: str, body: bytes, data) -> tuple[Run, bool]:
    """PUT .../state as received: the body's bytes and their parsed JSON (not yet validated).

    A body byte for byte the one that put the run's current state is answered from one
    plain read before any validation (it was valid, and changes nothing); anything else is
    validated (Invalid with each field path) and handed to `run_state_put`.
    """
    raw = hashlib.sha256(body).hexdigest()
    held = _runs(tenant_id=tenant.pk, run_id=run_id).first()
    if held is not None and digest_raw_part(held.snapshot_digest) == raw[:32]:
        return held, False
    try:
        state = RunStateIn.model_validate(data)
    except ValidationError as exc:
        raise Invalid(
            "the request body is invalid",
            code="validation_error",
            details=[
                {"path": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]}
                for e in exc.errors()
            ],
        ) from None
    return run_state_put(tenant=tenant, run_id=run_id, state=state, body_digest=raw)


def run_state_put(
    *, tenant: Tenant, run_id: str, state: RunStateIn, body_digest: str | None = None
) -> tuple[Run, bool]:
    """Reconcile the run `run_id` to a whole state. (run, True) when this created the run.

    An identical state is answered from one plain read (no transaction, no lock): it changes
    nothing whatever happens concurrently. Anything else is one transaction under the lock.
    `body_digest`: the SHA-256 of the request body, remembered for the next identical PUT.
    """
    problems = run_state_problems(state, run_id=run_id)
    if problems:
        raise Invalid("the state is invalid", code="validation_error", details=problems)
    text, digest = state_serialize(state)
    held = _runs(tenant_id=tenant.pk, run_id=run_id).first()
    if held is not None and digest_state_part(held.snapshot_digest) == digest[:32]:
        return held, False  # identical: nothing to write or publish
    stored = digest[:32] + (body_digest or NO_BODY)[:32]
    return _state_apply(tenant=tenant, run_id=run_id, state=state, text=text, digest=stored)


# `run.snapshot_digest` (64 characters) holds two 128-bit digests: of the state's normalized
# wire form (what "identical" means) and of the request body that put it (a shortcut).
NO_BODY = "-" * 32


def digest_state_part(stored: str) -> str:
    return stored[:32]


def digest_raw_part(stored: str) -> str:
    return stored[32:64] or NO_BODY


@transaction.atomic
def _state_apply(*, tenant, run_id: str, state: RunStateIn, text: str, digest: str):
    _lock_tree(tenant_id=tenant.pk, state=state)
    run, created = _run_held_or_new(tenant=tenant, state=state, parent=None)
    if not created and digest_state_part(run.snapshot_digest) == digest[:32]:
        return run, False  # an identical PUT got there first
    _reconcile(run=run, created=created, state=state, wire=json.loads(text), digest=digest)
    return run, created


def _lock_tree(*, tenant_id: int, state: RunStateIn) -> None:
    """Lock the held runs of the state and its sub-runs at once, in primary-key order (the
    decision service locks a parent and its child in that order too: no deadlock)."""
    ids, todo = [], [state]
    while todo:
        current = todo.pop()
        ids.append(current.id)
        todo += [e.state for e in current.pending_sub_runs or []]
    qs = Run.objects.select_for_update(of=("self",)).filter(
        tenant_id=tenant_id, external_id__in=ids
    )
    list(qs.order_by("pk").values_list("pk", flat=True))


def state_serialize(state: RunStateIn) -> tuple[str, str]:
    """The state's wire text (what is stored) and its digest; Invalid if it cannot be stored."""
    try:
        text = state.model_dump_json(by_alias=True, exclude_unset=True)
    except PydanticSerializationError:
        text = None
    problem = "strings must be valid Unicode text" if text is None else wire_text_problem(text)
    if problem:
        path = bad_string_path(state.model_dump(by_alias=True, exclude_unset=True))
        raise Invalid(
            "the state is invalid",
            code="validation_error",
            details=[{"path": path or "body", "message": problem}],
        )
    return text, hashlib.sha256(text.encode()).hexdigest()


def _runs(*, tenant_id: int, run_id: str):
    qs = Run.objects.select_related(*RUN_RELATED).defer("snapshot")
    return qs.filter(tenant_id=tenant_id, external_id=run_id)


def run_locked(*, tenant_id: int, run_id: str) -> Run | None:
    """The run's row, locked (the row only: not the tenant's or principal's), snapshot deferred."""
    return _runs(tenant_id=tenant_id, run_id=run_id).select_for_update(of=("self",)).first()


def _reconcile(*, run: Run, created: bool, state: RunStateIn, wire: dict, digest: str, parent=None):
    if not created:
        _run_adopt(run=run, state=state, parent=parent)
    w = RunWrites(run)
    children = _sub_runs(run=run, state=state, wire=wire)
    _steps(w, state)
    messages_keep_append(run=run, messages=wire["messages"], writes=w)
    _handoffs(w, state)
    _usage(w, state)
    _approvals(w, state=state, wire=wire, children=children)
    _details(w, state=state, wire=wire)
    _status(w, state=state, wire=wire)
    envelope = snapshot_envelope(run)
    run.snapshot = {**envelope, "state": wire, "lastSeq": run.last_seq}
    run.snapshot_digest = digest
    w.touch("snapshot", "snapshot_digest")
    w.flush()


# --- the run itself ---


def _run_held_or_new(*, tenant, state: RunStateIn, parent: Run | None) -> tuple[Run, bool]:
    """The held run (locked), or a new one first seen through this snapshot: agentVersion 0,
    its principal only if the state names one. (run, True) when it is new."""
    run = run_locked(tenant_id=tenant.pk, run_id=state.id)
    if run is not None:
        return run, False
    fields = {
        "agent": common.agent_ensure(tenant=tenant, external_id=state.agent_id),
        "agent_version": 0,
        "current_agent_id": state.current_agent_id,
        "principal": common.principal(tenant=tenant, external_id=state.user_id),
        "conversation": common.conversation_ensure(tenant=tenant, external_id=state.session_id),
        "parent_run_id": parent.external_id if parent else None,
        "started_at": _time(state.started_at),
    }
    try:
        with transaction.atomic():
            run = Run.objects.create(tenant=tenant, external_id=state.id, **fields)
    except IntegrityError:  # a concurrent PUT created it first: that one is held now
        return run_locked(tenant_id=tenant.pk, run_id=state.id), False
    realtime.run_changed(run=run, what=["created"])
    return run, True


def _run_adopt(*, run: Run, state: RunStateIn, parent: Run | None) -> None:
    """A held run takes the state unless it contradicts what the run is. An admitted run keeps
    its principal, roles and limits; a conversation or parent it lacked is taken."""
    if run.agent.external_id != state.agent_id:
        raise Conflict(
            f"run '{run.external_id}' belongs to agent '{run.agent.external_id}'",
            code="run_agent_differs",
            details={"agentId": run.agent.external_id},
        )
    if run.is_finished:
        raise Conflict(
            f"run '{run.external_id}' has finished; only an identical state may be put again",
            code="run_finished",
            details={"status": run.status},
        )
    if parent is not None and run.parent_run_id not in (None, parent.external_id):
        raise Conflict(
            f"run '{run.external_id}' is a sub-run of '{run.parent_run_id}'",
            code="run_parent_differs",
            details={"parentRunId": run.parent_run_id},
        )
    if parent is not None and run.parent_run_id is None:
        run.parent_run_id = parent.external_id
        _touch_header(run, "parent_run_id")
    if run.conversation_id is None and state.session_id:
        run.conversation = common.conversation_ensure(
            tenant=run.tenant, external_id=state.session_id
        )
        _touch_header(run, "conversation")
    if run.principal_id is None and run.admission is None and state.user_id:
        run.principal = common.principal(tenant=run.tenant, external_id=state.user_id)
        _touch_header(run, "principal")


def _touch_header(run: Run, field: str) -> None:
    run.save(update_fields=[field, "updated_at"])
    realtime.run_changed(run=run, what=["header"])


def _sub_runs(*, run: Run, state: RunStateIn, wire: dict) -> dict[str, Run]:
    """Each parked sub-run becomes (or updates) a child run holding its own state."""
    children = {}
    entries = zip(state.pending_sub_runs or [], wire.get("pendingSubRuns") or [], strict=True)
    for entry, raw in entries:
        _, digest = state_serialize(entry.state)
        digest = digest[:32] + NO_BODY
        child, created = _run_held_or_new(tenant=run.tenant, state=entry.state, parent=run)
        if created or digest_state_part(child.snapshot_digest) != digest[:32]:
            _reconcile(
                run=child,
                created=created,
                state=entry.state,
                wire=raw["state"],
                digest=digest,
                parent=run,
            )
        elif child.parent_run_id != run.external_id:
            _run_adopt(run=child, state=entry.state, parent=run)
        children[entry.tool_call_id] = child
    return children


# --- what happened in it ---


def _steps(w: RunWrites, state: RunStateIn) -> None:
    """Steps the state lists are created or corrected; steps the console holds stay."""
    run = w.run
    w.preload_steps([s.step_number for s in state.steps])
    for s in state.steps:
        held = w.steps.get(s.step_number)
        started = _time(s.started_at)
        if held is None or (held.agent_id, held.model, held.started_at) != (
            s.agent_id,
            s.model,
            started,
        ):
            common.step_start(
                run=run,
                step=s.step_number,
                agent_id=s.agent_id,
                model=s.model,
                started_at=started,
                writes=w,
            )
        usage = s.usage.model_dump()
        finished = _time(s.finished_at) if s.finished_at else None
        if finished is None or _step_counts(w.steps[s.step_number], usage, finished):
            continue
        row = w.steps[s.step_number]
        common.step_finish_usage(
            run=run,
            step=s.step_number,
            model=s.model,
            usage=usage,
            finish_reason=row.finish_reason,
            trace_id=row.trace_id,
            finished_at=finished,
            writes=w,
        )


def _step_counts(row: StepRow, usage: dict, finished: datetime) -> bool:
    """Does the held step already count exactly this usage, finished at this time?"""
    same = all(getattr(row, f) == usage[f] for f in USAGE_FIELDS)
    return same and row.finished_at == finished


def messages_keep_append(*, run: Run, messages: list[dict], writes: RunWrites) -> list[Message]:
    """`messages` are the whole run so far (wire form): keep the ones held, append the rest.
    A tool message appended also records the call's result (its content)."""
    held = Message.objects.filter(run=run).count()
    new = messages[held:]
    if not new:
        return []
    rows = common.messages_append(
        run=run,
        messages=[
            {
                "role": m["role"],
                "content": m["content"],
                "tool_calls": m.get("toolCalls"),
                "tool_call_id": m.get("toolCallId"),
            }
            for m in new
        ],
        writes=writes,
    )
    names = {c["id"]: c["name"] for m in messages for c in m.get("toolCalls") or []}
    for m in new:
        call_id = m.get("toolCallId")
        if m["role"] == "tool" and call_id in names:
            common.tool_result_record(
                run=run,
                step=None,
                tool_call_id=call_id,
                tool_name=names[call_id],
                result=m["content"],
                is_error=False,
                writes=writes,
            )
    return rows


def _handoffs(w: RunWrites, state: RunStateIn) -> None:
    """Handoffs the console holds stay; the ones after them are recorded."""
    held = Handoff.objects.filter(run=w.run, kind=Handoff.Kind.HANDOFF).count()
    for h in state.handoffs[held:]:
        common.handoff_record(
            run=w.run,
            step=h.step_number,
            from_agent_id=h.from_agent_id,
            to_agent_id=h.to_agent_id,
            writes=w,
        )


def _usage(w: RunWrites, state: RunStateIn) -> None:
    """The run's usage and usage by model become the state's; the daily rollup gets the
    difference. Without usageByModel: one entry for the primary model (the first step's)."""
    run = w.run
    total = state.usage.model_dump()
    if state.usage_by_model is not None:
        target = {m: u.model_dump() for m, u in state.usage_by_model.items()}
    else:
        first = min(state.steps, key=lambda s: s.step_number, default=None)
        target = {first.model if first else "": total}
    held = run.usage_by_model or {}
    for model in sorted(target.keys() | held.keys()):
        want, have = target.get(model, usage_zero()), held.get(model, usage_zero())
        delta = {f: want.get(f, 0) - have.get(f, 0) for f in USAGE_FIELDS}
        if any(delta.values()):
            usage_add(run=run, model=model, usage=delta, steps=0, writes=w)
    if run.usage_by_model != target or run.usage != total:
        run.usage_by_model = target
        for field in USAGE_FIELDS:
            setattr(run, field, total[field])
        w.touch(*USAGE_FIELDS, "usage_by_model", what="usage")


def usage_add(
    *,
    run: Run,
    model: str,
    usage: dict,
    steps: int = 0,
    at: datetime | None = None,
    writes: RunWrites | None = None,
) -> None:
    """Usage not tied to one step (a snapshot's correction, an outcome's sum): added to the
    run, its model and the daily rollup, by the same arithmetic as a step's usage."""
    carrier = StepRow(number=0, agent_id=run.current_agent_id, finished_at=at or timezone.now())
    with common._unit(run, writes) as unit:
        common._usage_apply(unit, row=carrier, model=model, usage=usage, steps=steps)
        unit.touch(*USAGE_FIELDS, "usage_by_model", what="usage")


# --- held calls: new ones requested, unlisted pending ones cancelled, mirrors linked ---


def _approvals(w: RunWrites, *, state: RunStateIn, wire: dict, children: dict) -> None:
    run = w.run
    held = {a.tool_call_id: a for a in Approval.objects.filter(run=run)}
    listed = list(zip(state.pending_approvals, wire["pendingApprovals"], strict=True))
    new = [(a, raw) for a, raw in listed if a.tool_call_id not in held]
    if new:
        step = max((s.step_number for s in state.steps), default=run.steps) or None
        rows = approvals_request(
            run=run, step=step, calls=[_call(a, raw) for a, raw in new], writes=w
        )
        held.update({r.tool_call_id: r for r in rows})
    _mirrors_link([(held[a.tool_call_id], a) for a, _ in listed], children)
    keep = {a.tool_call_id for a in state.pending_approvals}
    stale = [
        a
        for a in held.values()
        if a.status == ApprovalStatus.PENDING and a.tool_call_id not in keep
    ]
    if stale:
        approvals_cancel(approvals=stale, keep_runs={c.pk for c in children.values()})
        w.what.add("approvals")


def _call(approval, raw: dict) -> dict:
    return {
        "tool_call_id": approval.tool_call_id,
        "tool_name": approval.tool_name,
        "arguments": raw.get("arguments"),
        "reason": approval.reason,
        "rejection_message": approval.rejection_message,
        "sub_run_tool_call_id": approval.sub_run_tool_call_id,
    }


def _mirrors_link(pairs: list, children: dict) -> None:
    """A parent's approval for a parked sub-run's call mirrors the child's own approval."""
    linked = []
    for row, listed in pairs:
        child = children.get(listed.sub_run_tool_call_id)
        if child is None or row.mirror_of_id is not None:
            continue
        target = Approval.objects.filter(run=child, tool_call_id=row.tool_call_id).first()
        if target is not None:
            row.mirror_of = target
            linked.append(row)
    if linked:
        Approval.objects.bulk_update(linked, ["mirror_of"])


def approvals_cancel(*, approvals: list[Approval], keep_runs=()) -> list[str]:
    """These pending approvals are no longer held (a newer state dropped them): `cancelled`,
    with every approval of the same call (mirrors), each run told once. Mirrors in
    `keep_runs` (sub-runs the same state still parks, whose own lists decide) stay."""
    group = {a.pk: a for a in approvals}
    for approval in approvals:
        targets = approval_mirror_targets(approval)
        group.update({m.pk: m for m in targets if m.run_id not in keep_runs})
    pending = Approval.objects.filter(pk__in=list(group), status=ApprovalStatus.PENDING)
    cancelled = list(pending.select_related("run", "run__tenant"))
    pending.update(status=ApprovalStatus.CANCELLED)
    by_run: dict[int, list[Approval]] = {}
    for approval in cancelled:
        by_run.setdefault(approval.run_id, []).append(approval)
    for rows in by_run.values():
        realtime.approvals_changed(
            run=rows[0].run, approval_ids=[a.public_id for a in rows], change="cancelled"
        )
    return [a.public_id for a in cancelled]


def approval_mirror_targets(approval: Approval) -> list[Approval]:
    """Every other approval of the same held call: up the `mirror_of` chain to the sub-run's
    own approval, then every mirror of it at any depth (parent, grandparent...). The decision
    service decides those still pending together with `approval`, in its transaction.
    Each comes with `run` and `run.tenant` loaded."""
    base = Approval.objects.select_related("run", "run__tenant")
    root, seen = approval, {approval.pk}
    while root.mirror_of_id and root.mirror_of_id not in seen:
        root = base.get(pk=root.mirror_of_id)
        seen.add(root.pk)
    group, frontier = {root.pk: root}, [root.pk]
    while frontier:
        found = list(base.filter(mirror_of_id__in=frontier).exclude(pk__in=list(group)))
        group.update({a.pk: a for a in found})
        frontier = [a.pk for a in found]
    return [a for pk, a in group.items() if pk != approval.pk]


# --- the rest of the state ---


def _details(w: RunWrites, *, state: RunStateIn, wire: dict) -> None:
    """Todos, taint and promoted tools are replaced when the state carries them; verdicts
    widen only; `currentAgentId` is the state's (never a handoff's target)."""
    run = w.run
    if "todos" in wire and wire["todos"] != run.todos:
        common.todos_replace(run=run, todos=wire["todos"], writes=w)
    if "taintSummary" in wire and wire["taintSummary"] != run.taint_summary:
        common.taint_replace(run=run, taint_summary=wire["taintSummary"], writes=w)
    _set(w, "promoted_tools", wire, "promotedTools", what="header")
    _verdicts(w, wire.get("verdicts") or {})
    if run.current_agent_id != state.current_agent_id:
        run.current_agent_id = state.current_agent_id
        w.touch("current_agent_id", what="header")


def _set(w: RunWrites, field: str, wire: dict, key: str, *, what: str) -> None:
    if key in wire and getattr(w.run, field) != wire[key]:
        setattr(w.run, field, wire[key])
        w.touch(field, what=what)


def _verdicts(w: RunWrites, verdicts: dict) -> None:
    """Each verdict not recorded yet is recorded (rows only add; the run keeps the widest)."""
    if not verdicts:
        return
    recorded = set(
        Verdict.objects.filter(run=w.run).values_list("turn", "verdict", "guard", "reason")
    )
    for turn, v in verdicts.items():
        if (turn, v["verdict"], v["guard"], v["reason"]) not in recorded:
            common.verdict_record(
                run=w.run,
                turn=turn,
                verdict=v["verdict"],
                guard=v["guard"],
                reason=v["reason"],
                writes=w,
            )


def _status(w: RunWrites, *, state: RunStateIn, wire: dict) -> None:
    run = w.run
    status = STATUS_FROM_STATE[state.status]
    if status in (RunStatus.DONE, RunStatus.FAILED, RunStatus.ABORTED):
        common.run_finish(
            run=run,
            status=status,
            result=run.result,
            ended_by_tool=run.ended_by_tool,
            finish_reason=run.finish_reason,
            usage_denied=run.usage_denied,
            error=wire.get("error", run.error),
            finished_at=_time(state.finished_at) if state.finished_at else None,
            writes=w,
        )
        return
    _set(w, "error", wire, "error", what="status")
    common.run_status_set(run=run, status=status, writes=w)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)
