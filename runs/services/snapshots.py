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
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from console.core.errors import Conflict, Invalid
from console.live import realtime
from console.models import Tenant
from runs import access as runs_access
from runs.models import Run, snapshot_envelope
from runs.schemas_state import (
    RunStateIn,
    bad_string_path,
    run_state_problems,
    wire_text_problem,
)
from runs.services import common, reconcile
from runs.services.writes import RunWrites

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
    """The run's row, locked, with what reconciling reads (runs_access.run_locked)."""
    return runs_access.run_locked(tenant_id=tenant_id, run_id=run_id, related=RUN_RELATED)


def _reconcile(*, run: Run, created: bool, state: RunStateIn, wire: dict, digest: str, parent=None):
    if not created:
        _run_adopt(run=run, state=state, parent=parent)
    w = RunWrites(run)
    children = _sub_runs(run=run, state=state, wire=wire)
    reconcile.steps_reconcile(w, state)
    reconcile.messages_keep_append(run=run, messages=wire["messages"], writes=w)
    reconcile.handoffs_reconcile(w, state)
    reconcile.usage_reconcile(w, state)
    reconcile.approvals_reconcile(w, state=state, wire=wire, children=children)
    reconcile.details_reconcile(w, state=state, wire=wire)
    reconcile.status_reconcile(w, state=state, wire=wire)
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
        "started_at": datetime.fromisoformat(state.started_at),
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
