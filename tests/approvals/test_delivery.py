"""The long-poll's read from the event loop (approvals/services/delivery.py on console/adb.py):
on PostgreSQL it answers exactly what the ORM path answers, in one SELECT (and the pickup's
UPDATE) without a thread hop; it steps aside whenever the ORM path must answer."""

from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, Rule
from approvals.services import delivery
from approvals.services.decisions import approval_decide
from console.core import adb
from console.core.db import released
from tests.support.factories import ApprovalFactory, RunFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
async def calls(tenant_a, reviewer_a):
    """A run with a call of every kind: approved by a person with edited arguments, denied by
    a rule, expired, approved and already delivered, and two pending."""

    def build():
        run = RunFactory(tenant=tenant_a, external_id="run_deliver")
        made = [ApprovalFactory(run=run, position=n, tool_call_id=f"c{n}") for n in range(6)]
        approval_decide(
            approval=made[0], viewer=reviewer_a, decision="approve", arguments={"to": ["x", 1]}
        )
        rule = Rule.objects.create(tenant=tenant_a, name="no", effect="deny", message="rule says")
        now = timezone.now()
        Approval.objects.filter(pk=made[1].pk).update(
            status=ApprovalStatus.DENIED, decided_by_rule=rule, decided_at=now,
            message="rule says", decision_seq=2,
        )  # fmt: skip
        Approval.objects.filter(pk=made[2].pk).update(
            status=ApprovalStatus.EXPIRED, decided_at=now, message="late", decision_seq=3
        )
        Approval.objects.filter(pk=made[3].pk).update(
            status=ApprovalStatus.APPROVED, decided_by=reviewer_a, decided_at=now,
            decision_seq=4, delivered_at=now,
        )  # fmt: skip
        return run

    return await sync_to_async(build)()


async def both(run, **kwargs):
    """The async answer, then (with the pickup undone) the ORM path's answer to the same."""
    marked_before = await sync_to_async(
        lambda: set(Approval.objects.filter(run=run).exclude(delivered_at=None).values_list("pk"))
    )()
    with mock.patch.object(delivery, "released", wraps=released) as hop:
        fast = await delivery.decisions_answer_async(run=run, **kwargs)
    assert hop.call_count == 0  # no thread hop: the read ran on the event loop
    await sync_to_async(
        lambda: Approval.objects.filter(run=run).exclude(pk__in=[p for (p,) in marked_before])
        .update(delivered_at=None)
    )()  # fmt: skip
    slow = await released(delivery.decisions_answer)(run=run, **kwargs)
    return fast, slow


@pytest.mark.parametrize(
    "kwargs",
    [
        {"after": None, "deliver": False},
        {"after": 0, "deliver": False},
        {"after": 2, "deliver": True},
        {"after": 9, "deliver": False},
        {"after": 9, "deliver": True},
    ],
)
async def test_the_async_read_answers_what_the_orm_answers(calls, kwargs):
    assert adb.usable()
    fast, slow = await both(calls, **kwargs)
    assert (fast.body, fast.newly_delivered) == (slow.body, slow.newly_delivered)
    assert fast.recheck_in == pytest.approx(slow.recheck_in, abs=1.0)
    if fast.body is not None and fast.body["decisions"]:
        first = fast.body["decisions"][0]
        if kwargs["after"] in (None, 0):
            assert first["arguments"] == {"to": ["x", 1]}  # JSON as stored, not a string
            assert first["decided_by"] == "reviewer@a.example"


async def test_a_call_past_its_expiry_is_expired_through_the_decision_writer(calls):
    await sync_to_async(
        lambda: Approval.objects.filter(run=calls, tool_call_id="c4").update(
            expires_at=timezone.now() - timezone.timedelta(seconds=1)
        )
    )()
    answer = await delivery.decisions_answer_async(run=calls, after=4, deliver=False)
    assert [d["tool_call_id"] for d in answer.body["decisions"]] == ["c4"]
    assert answer.body["decisions"][0]["decision"] == "expired"
    assert answer.body["pending"] == ["c5"]


async def test_an_unreachable_async_read_falls_back_to_the_orm(calls):
    import psycopg

    with mock.patch.object(adb, "fetch", side_effect=psycopg.OperationalError("gone")):
        answer = await delivery.decisions_answer_async(run=calls, after=None, deliver=False)
    assert [d["tool_call_id"] for d in answer.body["decisions"]] == ["c0", "c1", "c2"]


async def test_a_bug_in_the_async_read_is_not_hidden(calls):
    with (
        mock.patch.object(adb, "fetch", side_effect=KeyError("bug")),
        pytest.raises(KeyError),
    ):
        await delivery.decisions_answer_async(run=calls, after=None, deliver=False)


async def test_inside_a_transaction_or_switched_off_the_orm_answers(calls, settings):
    settings.GAVEL_ASYNC_READS = False
    assert not adb.usable()
    with mock.patch.object(adb, "fetch") as fetch:
        answer = await delivery.decisions_answer_async(run=calls, after=0, deliver=True)
    assert not fetch.called and answer.body["cursor"] == "4"
