"""Retention: what each tenant's policy prunes and what it keeps, in small batches; the audit
log only as a signed prefix of its chain, so /audit/verify still holds (SQLite and
PostgreSQL; the trigger's part on PostgreSQL only)."""

from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, DeliveryStatus, Webhook, WebhookDelivery
from console.audit.log import audit, audit_seal_due, audit_verify
from console.core import auditchain
from console.models import AuditCheckpoint, AuditEvent, SigninThrottle, Tenant, UserSession
from notifications.models import EmailState, Notification, OutboundEmail
from retention.models import RetentionPolicy
from retention.prune import prune_all, prune_once
from runs.models import Message, Run, RunEvent
from tests.support.factories import ApprovalFactory, RunFactory

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def _prune(**kwargs) -> dict:
    total: dict = {}
    for done in prune_all(**kwargs):
        for name, count in done.items():
            total[name] = total.get(name, 0) + count
    return total


def _run_with_rows(tenant, run_id, *, age_days, events=7, status="done"):
    at = timezone.now() - timedelta(days=age_days)
    run = RunFactory(tenant=tenant, external_id=run_id, status=status)
    Run.objects.filter(pk=run.pk).update(started_at=at, updated_at=at)
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=n, type="message", data={"n": n}, at=at) for n in range(1, events + 1)
    )
    Message.objects.bulk_create(
        Message(run=run, position=n, step=1, role="assistant", content="hi") for n in range(3)
    )
    return run


def test_old_runs_go_with_their_rows_in_batches_young_and_pending_ones_stay(tenant_a, tenant_b):
    RetentionPolicy.objects.create(tenant=tenant_a, run_days=30)
    old = _run_with_rows(tenant_a, "run_old", age_days=40, events=12)
    ApprovalFactory(run=old, tool_call_id="c1", status=ApprovalStatus.APPROVED)
    young = _run_with_rows(tenant_a, "run_young", age_days=5)
    waiting = _run_with_rows(tenant_a, "run_waiting", age_days=40, status="awaiting_approval")
    ApprovalFactory(run=waiting, tool_call_id="c2")  # pending: never pruned under a runtime
    other = _run_with_rows(tenant_b, "run_old", age_days=400)  # tenant B keeps runs forever

    first = prune_once(batch=5, budget=0)
    assert first == {"runRows": 5}  # one small batch of the oldest run's events, no more
    total = _prune(batch=5)
    assert total["runs"] == 1 and total["approvals"] == 1
    assert not Run.objects.filter(pk=old.pk).exists()
    assert not RunEvent.objects.filter(run_id=old.pk).exists()
    assert not Approval.objects.filter(run_id=old.pk).exists()
    for kept in (young, waiting, other):
        assert Run.objects.filter(pk=kept.pk).exists()
        assert RunEvent.objects.filter(run=kept).count() == 7
    assert prune_once(batch=5) == {}  # nothing left to do
    assert all(RunEvent.objects.filter(run=r).exists() for r in (young, waiting, other))


def test_sent_mail_delivered_webhooks_and_read_notifications_go_the_rest_stays(tenant_a, admin_a):
    now = timezone.now()
    old, young = now - 40 * DAY, now - 2 * DAY

    def mail(state, at):
        return OutboundEmail.objects.create(
            tenant=tenant_a,
            to="a@example.com",
            subject="s",
            text_body="x" * 100,
            state=state,
            created_at=at,
        )

    sent_old, pending_old, sent_young = (
        mail(EmailState.SENT, old),
        mail(EmailState.PENDING, old),
        mail(EmailState.SENT, young),
    )
    hook = Webhook.objects.create(tenant=tenant_a, url="https://h.example/x", events=["*"])

    def delivery(status, at):
        return WebhookDelivery.objects.create(
            webhook=hook, event="approval.decided", payload={}, status=status, created_at=at
        )

    delivered_old, pending_hook = (
        delivery(DeliveryStatus.DELIVERED, old),
        delivery(DeliveryStatus.PENDING, old),
    )

    def note(read_at):
        return Notification.objects.create(
            tenant=tenant_a,
            principal=admin_a,
            kind="approval.requested",
            title="t",
            read_at=read_at,
        )

    read_old, read_young, unread = note(now - 100 * DAY), note(now - DAY), note(None)

    total = _prune(batch=2)
    assert total["mails"] == 1 and total["webhookDeliveries"] == 1
    assert total["notifications"] == 1
    assert set(OutboundEmail.objects.values_list("pk", flat=True)) == {
        pending_old.pk,
        sent_young.pk,
    }  # never a mail still to send
    assert not OutboundEmail.objects.filter(pk=sent_old.pk).exists()
    assert set(WebhookDelivery.objects.values_list("pk", flat=True)) == {pending_hook.pk}
    assert not WebhookDelivery.objects.filter(pk=delivered_old.pk).exists()
    assert set(Notification.objects.values_list("pk", flat=True)) == {read_young.pk, unread.pk}
    assert not Notification.objects.filter(pk=read_old.pk).exists()


def test_forever_means_forever(tenant_a, admin_a):
    RetentionPolicy.objects.create(
        tenant=tenant_a,
        run_days=None,
        sent_mail_days=None,
        webhook_delivery_days=None,
        read_notification_days=None,
    )
    ancient = timezone.now() - 3000 * DAY
    _run_with_rows(tenant_a, "run_ancient", age_days=3000)
    OutboundEmail.objects.create(
        tenant=tenant_a,
        to="a@example.com",
        subject="s",
        text_body="x",
        state=EmailState.SENT,
        created_at=ancient,
    )
    assert _prune() == {}
    assert Run.objects.count() == 1 and OutboundEmail.objects.count() == 1


def test_expired_sessions_ended_sign_ins_and_idle_throttles_go(admin_a):
    now = timezone.now()
    Session.objects.create(session_key="a" * 32, session_data="x", expire_date=now - DAY)
    Session.objects.create(session_key="b" * 32, session_data="x", expire_date=now + DAY)
    UserSession.objects.create(session_key="a" * 32, user=admin_a.user, created_at=now - 3 * DAY)
    UserSession.objects.create(session_key="b" * 32, user=admin_a.user, created_at=now - 3 * DAY)
    SigninThrottle.objects.create(scope="address", key="1" * 64, window_start=now - 3 * DAY)
    SigninThrottle.objects.create(scope="address", key="2" * 64, window_start=now)
    total = _prune()
    assert total["sessions"] == 1 and total["signinRecords"] == 1 and total["throttleRows"] == 1
    assert list(Session.objects.values_list("session_key", flat=True)) == ["b" * 32]
    assert list(UserSession.objects.values_list("session_key", flat=True)) == ["b" * 32]
    assert list(SigninThrottle.objects.values_list("key", flat=True)) == ["2" * 64]


def test_a_bad_batch_is_refused():
    with pytest.raises(ValueError):
        prune_once(batch=0)


# --- the audit log ---


def _entry(tenant, n, *, at=None):
    if at is None:
        return audit(tenant=tenant, action="budget.updated", object_type="budget", object_id=n)
    entry = AuditEvent(
        tenant=tenant, at=at, action="budget.updated", object_type="budget", object_id=str(n)
    )
    entry.save()
    return entry


def _chain(tenant) -> list[int]:
    return list(
        AuditEvent.objects.filter(tenant=tenant)
        .order_by("chain_seq")
        .values_list("chain_seq", flat=True)
    )


def test_the_audit_log_is_pruned_as_a_signed_prefix_and_still_verifies(tenant_a, tenant_b):
    now = timezone.now()
    for n in range(6):
        _entry(tenant_a, f"old{n}", at=now - (100 - n) * DAY)
    _entry(tenant_a, "young-in-between", at=now - DAY)
    _entry(tenant_a, "old-after-a-young-one", at=now - 90 * DAY)  # not in the prefix: stays
    _entry(tenant_a, "now")
    for n in range(3):
        _entry(tenant_b, f"b-old{n}", at=now - 100 * DAY)  # tenant B keeps its log forever
    audit_seal_due()
    assert audit_verify(tenant=tenant_a)["ok"]
    Tenant.objects.filter(pk=tenant_a.pk).update(audit_retention_days=30)
    before = len(_chain(tenant_a))

    total = _prune(batch=4)
    assert total["auditCheckpoints"] == 1 and total["auditEntries"] == 6
    assert _chain(tenant_a) == list(range(7, before + 1))  # exactly the old prefix went
    checkpoint = AuditCheckpoint.objects.filter(tenant=tenant_a).order_by("-pk").first()
    assert '"prunedThrough":6' in checkpoint.statement and '"by":"prune"' in checkpoint.statement
    verified = audit_verify(tenant=tenant_a)
    assert verified["ok"] and verified["entries"] == before - 6, verified
    assert len(_chain(tenant_b)) == 3 and audit_verify(tenant=tenant_b)["ok"]

    # later entries, later checkpoints: the pruned prefix is carried forward, never back
    _entry(tenant_a, "later")
    audit_seal_due()
    again = audit_verify(tenant=tenant_a)
    assert again["ok"] and again["entries"] == before - 5
    assert (
        '"prunedThrough":6'
        in AuditCheckpoint.objects.filter(tenant=tenant_a).order_by("-pk").first().statement
    )


def test_the_audit_prefix_moves_at_most_once_an_hour(tenant_a):
    now = timezone.now()
    Tenant.objects.filter(pk=tenant_a.pk).update(audit_retention_days=10)
    _entry(tenant_a, "a", at=now - 20 * DAY)
    _entry(tenant_a, "b", at=now - 20 * DAY)
    audit_seal_due()
    # the newest entry always stays: it holds the chain's position for the next seal
    assert _prune(now=now) == {"auditCheckpoints": 1, "auditEntries": 1}
    _entry(tenant_a, "c", at=now - 20 * DAY)
    audit_seal_due()
    assert _prune(now=now + timedelta(minutes=10)) == {}  # the hour is not over
    assert _prune(now=now + timedelta(hours=2)) == {"auditCheckpoints": 1, "auditEntries": 1}
    assert _chain(tenant_a) == [3]
    assert audit_verify(tenant=tenant_a)["ok"]


def test_the_model_still_refuses_every_delete_of_an_audit_entry(tenant_a):
    entry = _entry(tenant_a, "x")
    from console.models import AppendOnly

    with pytest.raises(AppendOnly):
        AuditEvent.objects.filter(pk=entry.pk).delete()


@pytest.mark.postgres
def test_postgres_refuses_a_delete_outside_the_signed_prefix(tenant_a):
    now = timezone.now()
    for n in range(3):
        _entry(tenant_a, f"old{n}", at=now - 100 * DAY)
    _entry(tenant_a, "young")
    audit_seal_due()
    table = AuditEvent._meta.db_table

    def delete(seq):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE tenant_id = %s AND chain_seq = %s",  # noqa: S608
                [tenant_a.pk, seq],
            )

    with pytest.raises(DatabaseError, match="append-only"):
        delete(1)  # no checkpoint names it pruned
    Tenant.objects.filter(pk=tenant_a.pk).update(audit_retention_days=30)
    assert prune_once(now=now) == {"auditCheckpoints": 1}
    with pytest.raises(DatabaseError, match="append-only"):
        delete(4)  # the young entry: past the signed prefix
    assert _prune(now=now) == {"auditEntries": 3}
    assert audit_verify(tenant=tenant_a)["ok"]


@pytest.mark.postgres
def test_a_forged_checkpoint_opens_a_delete_but_verify_reports_it(tenant_a):
    for n in range(3):
        _entry(tenant_a, n)
    audit_seal_due()
    statement = auditchain.checkpoint_statement(
        tenant=tenant_a.slug,
        position=3,
        head_hash="x",
        at=timezone.now(),
        keyed_from=1,
        pruned_through=3,
        pruned_hash="x",
        by="forger",
    )
    AuditCheckpoint.objects.create(
        tenant=tenant_a,
        at=timezone.now(),
        position=3,
        head_hash="x",
        statement=statement,
        key_id="0" * 16,
        signature="forged",
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {AuditEvent._meta.db_table} WHERE tenant_id = %s",  # noqa: S608
            [tenant_a.pk],
        )
    result = audit_verify(tenant=tenant_a)
    assert not result["ok"] and result["reason"] == "checkpoint_invalid"


def test_the_prune_command_says_what_it_did(tenant_a, capsys):
    RetentionPolicy.objects.create(tenant=tenant_a, run_days=30)
    _run_with_rows(tenant_a, "run_old", age_days=40, events=3)
    call_command("prune", "--batch", "2")
    out = capsys.readouterr().out
    assert "Pruned in" in out and "runs 1" in out and "runRows" in out
    call_command("prune")
    assert "Nothing to prune." in capsys.readouterr().out


def test_the_prune_command_refuses_bad_numbers(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--batch"):
        call_command("prune", "--batch", "0")
    with pytest.raises(CommandError, match="--duty"):
        call_command("prune", "--duty", "0")


def test_pruning_rests_between_steps_to_keep_its_share_of_time(tenant_a, monkeypatch):
    from retention import prune

    RetentionPolicy.objects.create(tenant=tenant_a, run_days=30)
    _run_with_rows(tenant_a, "run_old", age_days=40, events=3)
    waits = []
    monkeypatch.setattr(prune, "RUN_BUDGET", 0)  # one run step per prune_once
    monkeypatch.setattr(prune.time, "sleep", waits.append)
    assert sum(sum(d.values()) for d in prune.prune_all(duty=0.25)) == 7
    assert len(waits) == 3 and all(w > 0 for w in waits)  # three times each step's time


def test_the_sweep_prunes_a_batch_per_pass_then_looks_once_a_minute(tenant_a, monkeypatch):
    from console.core import outbox
    from retention import prune

    monkeypatch.setitem(prune._next_look, "at", 0.0)
    RetentionPolicy.objects.create(tenant=tenant_a, run_days=30)
    _run_with_rows(tenant_a, "run_old", age_days=40, events=3)
    monkeypatch.setattr(prune, "DUTY", 1.0)  # no rest between steps (the default paces them)
    monkeypatch.setattr(prune, "RUN_BUDGET", 0)  # one run step per pass
    assert outbox.run_due()["retention"] == 3  # the events, one batch
    assert outbox.run_due()["retention"] == 3  # the messages ...
    assert outbox.run_due()["retention"] == 1  # ... then the run
    assert outbox.run_due()["retention"] == 0  # nothing left: the next look is a minute away
    _run_with_rows(tenant_a, "run_old_2", age_days=40, events=3)
    assert outbox.run_due()["retention"] == 0
    assert "retention" not in outbox.run_due(in_server=True)  # never in a server process


def test_a_drain_stops_looking_at_tenants_with_nothing_due(tenant_a):
    """While one tenant's backlog drains, the other tenants' kinds found with nothing due are
    not looked at again: a step costs the same whether 2 or 12 tenants have nothing to do."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from retention import prune
    from tests.support.factories import TenantFactory

    RetentionPolicy.objects.create(tenant=tenant_a, run_days=30)

    def steps_queries(idle: int) -> list[int]:
        for _ in range(idle):
            RetentionPolicy.objects.create(tenant=TenantFactory(), run_days=30)
        _run_with_rows(tenant_a, f"run_old_{idle}", age_days=40, events=12)
        counts, drained = [], prune.prune_all(batch=5)
        while True:
            with CaptureQueriesContext(connection) as queries:
                done = next(drained, None)
            if done is None:
                return counts
            counts.append(len(queries.captured_queries))

    few, many = steps_queries(2), steps_queries(10)
    assert len(few) == len(many) >= 4  # 12 events by 5, 3 messages, the run
    assert few[0] < many[0]  # the first step looks at every tenant ...
    assert few[1:] == many[1:]  # ... the later ones only at the backlog's


def test_the_pace_rests_in_proportion_and_shrinks_slow_batches():
    from retention.prune import MIN_BATCH, STEP_SECONDS, Pace

    pace = Pace(batch=500, duty=0.2, pause=0.5)
    assert pace.after(0.01) == pytest.approx(0.5 + 0.04)  # four times the step, plus the pause
    assert pace.batch == 500  # never above the most asked for
    pace.after(STEP_SECONDS * 2)
    assert pace.batch == 250
    for _ in range(5):
        pace.after(STEP_SECONDS * 2)
    assert pace.batch == MIN_BATCH
    for _ in range(30):
        pace.after(STEP_SECONDS / 10)
    assert pace.batch == 500


def test_the_sweep_looks_at_everything_again_once_a_backlog_is_gone(tenant_a, monkeypatch):
    from retention import prune

    monkeypatch.setitem(prune._next_look, "at", 0.0)
    monkeypatch.setattr(prune, "_quiet", set())
    monkeypatch.setattr(prune, "DUTY", 1.0)
    monkeypatch.setattr(prune, "RUN_BUDGET", 0)
    RetentionPolicy.objects.create(tenant=tenant_a, run_days=30)
    _run_with_rows(tenant_a, "run_old", age_days=40, events=3)
    assert prune.prune_due() == 3
    assert (tenant_a.pk, "outbox") in prune._quiet  # nothing there: skipped while draining
    while prune.prune_due():
        pass
    assert prune._quiet == set()  # the next look (a minute away) sees everything again


def test_a_row_that_changed_after_it_was_picked_is_not_deleted(tenant_a, monkeypatch):
    from contextlib import contextmanager

    from retention import prune

    old = timezone.now() - 40 * DAY
    sent = [
        OutboundEmail.objects.create(
            tenant=tenant_a,
            to=f"{n}@a.example",
            subject="s",
            text_body="b",
            state=EmailState.SENT,
            created_at=old,
        )  # fmt: skip
        for n in range(3)
    ]
    real_atomic = transaction.atomic

    @contextmanager
    def requeued_first(*args, **kwargs):  # between the pick and the delete: one row re-queued
        OutboundEmail.objects.filter(pk=sent[0].pk).update(state=EmailState.PENDING)
        with real_atomic(*args, **kwargs):
            yield

    monkeypatch.setattr(prune.transaction, "atomic", requeued_first)
    mails = OutboundEmail.objects.filter(tenant=tenant_a, state=EmailState.SENT)
    assert prune._delete_batch(mails, 10) == 2
    assert list(OutboundEmail.objects.values_list("pk", flat=True)) == [sent[0].pk]
