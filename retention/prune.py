"""The pruner: each tenant's retention policy applied in small batches (issue #27).

`prune_once(batch=...)` does one small step of each kind and returns how many rows each
removed; the worker calls it between its other work, `manage.py prune` until nothing is left.
Every step is a transaction of its own that deletes at most `batch` rows found through an
index, so no step holds locks long enough to stall ingest (bench/retention.py measures it).

What goes, per tenant (retention.models.RetentionPolicy, defaults there):
- runs whose last activity (`updated_at`) is older than `run_days` and that hold no pending
  call: their events, messages, tool results, steps, verdicts, traces and handoffs in batches,
  then their approvals (with notices and overrides) and the run row. Usage rollups stay (they
  are totals by day, not rows of a run).
- sent or given-up mail (`sent_mail_days`), delivered or given-up webhook deliveries and
  Slack responses (`webhook_delivery_days`), mailed call batches (with the mail),
  notifications read longer ago than `read_notification_days`.
- the audit log, `Tenant.audit_retention_days`: only a whole prefix of the chain, and only
  after a signed checkpoint names it (`prunedThrough`, `prunedHash`), so `/audit/verify`
  still holds: first the checkpoint (at most once per AUDIT_CUT_EVERY), then, in later steps,
  the entries it covers (the PostgreSQL trigger allows exactly those: migration
  retention/0001_ops_retention).
And for everyone: expired browser sessions and the sign-in records of ended sessions, and
throttle rows whose window is over.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.contrib.sessions.models import Session
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, DeliveryStatus, WebhookDelivery
from console.audit.checkpoints import (
    audit_checkpoint,
    checkpoint_terms,
    latest_valid_checkpoint,
)
from console.models import AuditEvent, AuditRefusalThrottle, SigninThrottle, Tenant, UserSession
from notifications.models import (
    CallBatch,
    EmailState,
    Notification,
    OutboundEmail,
    SlackResponse,
    SlackResponseStatus,
)
from retention.models import DEFAULTS, RetentionPolicy
from runs import models as run_models

log = logging.getLogger("gavel.retention")

BATCH = 500
RUNS_PER_STEP = 50  # old runs a step works on together (their rows in batches of BATCH)
AUDIT_CUT_EVERY = timedelta(hours=1)  # how often a tenant's pruned audit prefix may move
RUN_BUDGET = 0.25  # seconds of run steps per tenant in one prune_once (0: a single step)
THROTTLE_KEEP = timedelta(days=1)  # sign-in and refusal throttle rows idle this long go

# A run's own rows, largest first: each deleted in batches before the run row.
RUN_CHILDREN = (
    run_models.RunEvent,
    run_models.Message,
    run_models.ToolResult,
    run_models.Step,
    run_models.Verdict,
    run_models.TurnVerdict,
    run_models.RunTrace,
    run_models.Handoff,
    run_models.UsageAdjustment,
)


def policy_of(tenant_id: int) -> dict:
    """The tenant's retention in days per kind (None: forever), the defaults where unset."""
    row = (
        RetentionPolicy.objects.filter(tenant_id=tenant_id)
        .values("run_days", "sent_mail_days", "webhook_delivery_days", "read_notification_days")
        .first()
    )
    return row or dict(DEFAULTS)


def _delete_batch(qs, batch: int, *, ordered: bool = True) -> int:
    """Delete up to `batch` rows of `qs` (by primary key, oldest first unless `ordered` is
    off: then whichever the index finds first); cascades and SET NULLs as the models say.
    The rows are found outside any transaction (most looks find nothing: no BEGIN/COMMIT
    for those), then deleted in a transaction of their own that re-applies `qs`'s filter,
    so a row that changed in between (a mail re-queued) is left alone."""
    model = qs.model
    picked = qs.order_by("pk") if ordered else qs.order_by()
    pks = list(picked.values_list("pk", flat=True)[:batch])
    if not pks:
        return 0
    with transaction.atomic():
        _, by_model = qs.filter(pk__in=pks).order_by().delete()
    return by_model.get(model._meta.label, 0)


# --- per tenant ---


def _prune_runs(tenant_id: int, days: int, now, batch: int) -> dict:
    """One step on the tenant's oldest prunable runs (up to RUNS_PER_STEP of them): a batch
    of their rows, or, when they have none left, their approvals and the runs themselves
    (re-checked under their row locks: a run that moved meanwhile is left alone)."""
    cutoff = now - timedelta(days=days)
    prunable = (
        run_models.Run.objects.filter(
            tenant_id=tenant_id, started_at__lt=cutoff, updated_at__lt=cutoff
        )
        .exclude(approvals__status=ApprovalStatus.PENDING)
        .order_by("started_at", "id")
    )
    runs = list(prunable.values_list("pk", flat=True)[:RUNS_PER_STEP])
    if not runs:
        return {}
    for child in RUN_CHILDREN:
        if done := _delete_batch(child.objects.filter(run_id__in=runs), batch, ordered=False):
            return {"runRows": done}
    with transaction.atomic():
        locked = list(
            prunable.filter(pk__in=runs)
            .select_for_update(of=("self",))
            .values_list("pk", flat=True)
        )
        if not locked:
            return {}
        Approval.objects.filter(run_id__in=locked, mirror_of__isnull=False).delete()
        _, approvals = Approval.objects.filter(run_id__in=locked).delete()
        _, removed = run_models.Run.objects.filter(pk__in=locked).delete()
    done = {"runs": removed.get(run_models.Run._meta.label, 0)}
    done["approvals"] = sum(n for label, n in approvals.items() if label == Approval._meta.label)
    return done


def _prune_outbox(tenant_id: int, policy: dict, now, batch: int) -> dict:
    done = {}
    if (days := policy["sent_mail_days"]) is not None:
        cutoff = now - timedelta(days=days)
        mails = OutboundEmail.objects.filter(
            tenant_id=tenant_id,
            state__in=(EmailState.SENT, EmailState.FAILED),
            created_at__lt=cutoff,
        )
        done["mails"] = _delete_batch(mails, batch)
        mailed = CallBatch.objects.filter(
            tenant_id=tenant_id, mailed_at__isnull=False, created_at__lt=cutoff
        )
        done["callBatches"] = _delete_batch(mailed, batch)
    if (days := policy["webhook_delivery_days"]) is not None:
        cutoff = now - timedelta(days=days)
        deliveries = WebhookDelivery.objects.filter(
            webhook__tenant_id=tenant_id,
            status__in=(DeliveryStatus.DELIVERED, DeliveryStatus.FAILED),
            created_at__lt=cutoff,
        )
        done["webhookDeliveries"] = _delete_batch(deliveries, batch)
        responses = SlackResponse.objects.filter(
            tenant_id=tenant_id,
            status__in=(SlackResponseStatus.DELIVERED, SlackResponseStatus.FAILED),
            created_at__lt=cutoff,
        )
        done["slackResponses"] = _delete_batch(responses, batch)
    if (days := policy["read_notification_days"]) is not None:
        read = Notification.objects.filter(
            tenant_id=tenant_id, read_at__lt=now - timedelta(days=days)
        )
        done["notifications"] = _delete_batch(read, batch)
    return done


# --- the audit log: a signed prefix, then its rows ---


def audit_cut(*, tenant_id: int, days: int, now) -> tuple[int, str | None]:
    """(position, hash) of the last entry of the longest prefix of the tenant's sealed chain
    whose entries are all older than `days` days, the newest entry never included (it holds
    the chain's position for the next seal); (0, None) when there is none."""
    cutoff = now - timedelta(days=days)
    sealed = AuditEvent.objects.filter(tenant_id=tenant_id, chain_seq__isnull=False)
    head = sealed.order_by("-chain_seq").values_list("chain_seq", flat=True).first()
    if head is None:
        return 0, None
    first_young = (
        sealed.filter(at__gte=cutoff).order_by("chain_seq").values_list("chain_seq", flat=True)
    ).first()
    last = sealed.filter(chain_seq__lt=min(head, first_young or head)).order_by("-chain_seq")
    return last.values_list("chain_seq", "hash").first() or (0, None)


def audit_prune_checkpoint(*, tenant: Tenant, days: int, now) -> int:
    """Sign a checkpoint whose pruned prefix reaches the current cut, when the cut moved past
    the one signed. Returns the new `prunedThrough` (0: nothing new to prune)."""
    terms = checkpoint_terms(latest_valid_checkpoint(tenant=tenant))
    position, head = audit_cut(tenant_id=tenant.pk, days=days, now=now)
    if position <= terms["pruned_through"]:
        return 0
    audit_checkpoint(
        tenant=tenant,
        by="prune",
        terms={**terms, "pruned_through": position, "pruned_hash": head},
    )
    return position


def _prune_audit(tenant: Tenant, days: int, now, batch: int) -> dict:
    """One step: delete a batch of entries inside the signed pruned prefix; when none are
    left, move the prefix (a new signed checkpoint, at most once per AUDIT_CUT_EVERY)."""
    pruned_through = checkpoint_terms(latest_valid_checkpoint(tenant=tenant))["pruned_through"]
    if pruned_through and (deleted := _delete_audit_prefix(tenant.pk, pruned_through, batch)):
        return {"auditEntries": deleted}
    policy, _ = RetentionPolicy.objects.get_or_create(tenant_id=tenant.pk)
    if policy.audit_cut_at is not None and now - policy.audit_cut_at < AUDIT_CUT_EVERY:
        return {}
    with transaction.atomic():
        moved = audit_prune_checkpoint(tenant=tenant, days=days, now=now)
        RetentionPolicy.objects.filter(pk=tenant.pk).update(audit_cut_at=now)
    return {"auditCheckpoints": 1} if moved else {}


def _delete_audit_prefix(tenant_id: int, through: int, batch: int) -> int:
    """The sanctioned DELETE of audit entries (the model refuses every other): up to `batch`
    sealed entries of the tenant at positions up to `through`, which a signed checkpoint
    names as pruned. On PostgreSQL the append-only trigger checks the same bound."""
    table = AuditEvent._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "  # noqa: S608
            "WHERE tenant_id = %s AND chain_seq IS NOT NULL AND chain_seq <= %s "
            "ORDER BY chain_seq LIMIT %s)",
            [tenant_id, through, batch],
        )
        return cursor.rowcount


# --- everyone's ---


def _prune_shared(now, batch: int) -> dict:
    done = {"sessions": _delete_batch(Session.objects.filter(expire_date__lt=now), batch)}
    ended = UserSession.objects.exclude(
        session_key__in=Session.objects.values("session_key")
    ).filter(created_at__lt=now - THROTTLE_KEEP)
    done["signinRecords"] = _delete_batch(ended, batch)
    idle = now - THROTTLE_KEEP
    signin = SigninThrottle.objects.filter(window_start__lt=idle).exclude(locked_until__gte=now)
    done["throttleRows"] = _delete_batch(signin, batch)
    refusals = AuditRefusalThrottle.objects.filter(pending=0, audited_at__lt=idle)
    done["throttleRows"] += _delete_batch(refusals, batch)
    return done


def _add(total: dict, done: dict) -> None:
    for name, count in done.items():
        if count:
            total[name] = total.get(name, 0) + count


def _prune_runs_for(tenant_id: int, days: int, now, batch: int, budget: float) -> dict:
    """Run steps (each its own transaction of at most `batch` rows) for up to `budget`
    seconds: a backlog of old runs goes at a useful pace without one long transaction."""
    total: dict = {}
    deadline = time.monotonic() + budget
    while done := _prune_runs(tenant_id, days, now, batch):
        _add(total, done)
        if time.monotonic() >= deadline:
            break
    return total


def _removed(done: dict) -> bool:
    return any(done.values())


def prune_once(
    *, batch: int = BATCH, now=None, budget: float | None = None, quiet: set | None = None
) -> dict:
    """One small step of every kind of pruning, for every tenant (old runs: steps for up to
    `budget` seconds, each a transaction of at most `batch` rows). Returns the rows removed by
    kind (only kinds with a count; `{}`: nothing was due). A tenant whose step fails (the
    database busy or gone) is logged and left for the next call: this never raises on a
    DatabaseError, so the worker's loop goes on.

    `quiet`, when given, is the caller's memory across the steps of one drain: each kind of
    each tenant (`(tenant id, "runs" | "outbox" | "audit")`, and `("shared",)`) that removed
    nothing is added to it, and is not looked at again while it is there. A backlog in one
    tenant then costs its own step, not a dozen looks at every other tenant each time (190
    queries a step with eleven tenants, 95 % of a step's time before)."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    now = now or timezone.now()
    budget = RUN_BUDGET if budget is None else budget
    quiet = set() if quiet is None else quiet
    total: dict = {}

    def kind(key, prune, *args) -> None:
        if key in quiet:
            return
        done = prune(*args)
        _add(total, done)
        if not _removed(done):
            quiet.add(key)

    try:
        kind(("shared",), _prune_shared, now, batch)
    except DatabaseError:
        log.warning("pruning sessions and throttles failed; retried later", exc_info=True)
    tenants = Tenant.objects.only("pk", "slug", "audit_retention_days").order_by("pk")
    for tenant in tenants.iterator(chunk_size=200):
        pk = tenant.pk
        if all((pk, name) in quiet for name in ("runs", "outbox", "audit")):
            continue
        try:
            policy = policy_of(pk)
            if policy["run_days"] is not None:
                kind((pk, "runs"), _prune_runs_for, pk, policy["run_days"], now, batch, budget)
            else:
                quiet.add((pk, "runs"))
            kind((pk, "outbox"), _prune_outbox, pk, policy, now, batch)
            if (days := tenant.audit_retention_days) is not None:
                kind((pk, "audit"), _prune_audit, tenant, days, now, batch)
            else:
                quiet.add((pk, "audit"))
        except DatabaseError:
            log.warning("pruning tenant %s failed; retried later", pk, exc_info=True)
    if total:
        log.info("pruned %s", total)
    return total


DUTY = 0.15  # the share of wall time pruning may take while a backlog lasts
STEP_SECONDS = 0.25  # a step slower than this (locks, a starved database) halves the batch
MIN_BATCH = 100


def _rest(elapsed: float, duty: float) -> float:
    """Seconds to wait after a step of `elapsed` seconds so pruning takes `duty` of the time."""
    return elapsed * (1 - duty) / duty


class Pace:
    """The drain's pace, adapted to the database's answer: after each step it rests in
    proportion to the step's time (`duty`: a busy database makes steps slower, and so the
    rests longer), and sizes the next batch so a step stays under STEP_SECONDS (halved when a
    step took longer, grown by a quarter, up to `batch`, when it took under half)."""

    def __init__(self, *, batch: int, duty: float, pause: float = 0.0):
        self.most, self.batch = batch, batch
        self.duty, self.pause = duty, pause

    def after(self, elapsed: float) -> float:
        """The rest after a step of `elapsed` seconds (and the next batch, in `self.batch`)."""
        if elapsed > STEP_SECONDS:
            self.batch = max(min(MIN_BATCH, self.most), self.batch // 2)
        elif elapsed < STEP_SECONDS / 2:
            self.batch = min(self.most, self.batch + max(1, self.batch // 4))
        return self.pause + _rest(elapsed, self.duty)


def prune_all(
    *, batch: int = BATCH, now=None, pause: float = 0.0, duty: float = 1.0, limit: int | None = None
):
    """`prune_once` until a step removes nothing (or after `limit` steps): yields each
    step's counts. Each step is one small transaction of old runs' rows (at most `batch`,
    fewer while steps run slow: `Pace`) beside the other kinds still due; the kinds and
    tenants found with nothing to do are not looked at again in this drain. Between steps it
    waits `pause` seconds, and long enough that pruning takes at most `duty` (0..1] of the
    wall time, which leaves the database and the CPUs to ingest (bench/retention.py measures
    the effect)."""
    if not 0 < duty <= 1:
        raise ValueError("duty must be in (0, 1]")
    pace = Pace(batch=batch, duty=duty, pause=pause)
    quiet: set = set()
    steps = 0
    while limit is None or steps < limit:
        started = time.monotonic()
        done = prune_once(batch=pace.batch, now=now, budget=0, quiet=quiet)
        steps += 1
        if not done:
            return
        yield done
        wait = pace.after(time.monotonic() - started)
        if wait:
            time.sleep(wait)


IDLE_EVERY = 60.0  # seconds between the sweep's looks when the last step found nothing
_next_look = {"at": 0.0}
_quiet: set = set()  # prune_once's memory while the sweep drains a backlog


def prune_due(*, now=None) -> int:
    """The sweep's (and the worker's) step, registered as an outbox sender
    (retention.apps): while a backlog lasts, a `prune_once` per pass (the kinds and tenants
    found with nothing to do are skipped until the backlog is gone), paced to take at most
    DUTY of the time; else a full look once a minute. Returns the rows removed."""
    clock = time.monotonic()
    if clock < _next_look["at"]:
        return 0
    removed = sum(prune_once(now=now, quiet=_quiet).values())
    elapsed = time.monotonic() - clock
    if removed:
        _next_look["at"] = clock + elapsed + _rest(elapsed, DUTY)
    else:
        _quiet.clear()  # the next look, a minute away, looks at everything again
        _next_look["at"] = clock + IDLE_EVERY
    return removed
