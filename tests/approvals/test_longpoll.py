"""The decisions long-poll holds, and answers the moment a decision or an expiry lands.

These run the async handler in the test's event loop (Django's AsyncClient) against a real
database (transaction=True: the decision commits, its on-commit publish wakes the poll through
the channel layer). Role and cross-tenant checks of the same endpoint: test_api.py.
"""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from approvals.models import Approval
from approvals.services.decisions import approval_decide
from tests.support.factories import ApprovalFactory, RunFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def setup(tenant_a, reviewer_a):
    run = RunFactory(tenant=tenant_a, external_id="run_poll")
    approval = ApprovalFactory(run=run, tool_call_id="call_poll")
    key = make_key(tenant_a, scopes=("ingest",))
    return run, approval, {"Authorization": f"Bearer {key}"}


def start_poll(headers, wait, **params):
    client = AsyncClient()
    path = "/api/v1/runs/run_poll/decisions"
    return asyncio.ensure_future(client.get(path, {"wait": wait, **params}, headers=headers))


async def test_a_long_poll_wakes_within_100ms_of_a_decision(setup, reviewer_a):
    run, approval, headers = setup
    await start_poll(headers, 0)  # warm the process up (the first request loads the URLconf)
    poll = start_poll(headers, 10)
    await asyncio.sleep(0.4)  # the poll is held: nothing decided, a call pending
    assert not poll.done()
    await sync_to_async(approval_decide)(
        approval=approval, viewer=reviewer_a, decision="deny", message="Exactly this."
    )
    decided = time.perf_counter()  # committed (and published on commit)
    response = await asyncio.wait_for(poll, 2)
    elapsed = time.perf_counter() - decided
    body = response.json()
    assert response.status_code == 200
    assert body["decisions"], body
    assert body["decisions"][0]["message"] == "Exactly this."
    assert body["complete"] is True
    assert elapsed < 0.1, f"woke {elapsed * 1000:.0f} ms after the decision"


async def test_a_long_poll_answers_within_1s_of_an_expiry(setup):
    run, approval, headers = setup
    expires_at = timezone.now() + timezone.timedelta(seconds=1.2)
    await sync_to_async(Approval.objects.filter(pk=approval.pk).update)(expires_at=expires_at)
    poll = start_poll(headers, 10)
    response = await asyncio.wait_for(poll, 5)
    late = (timezone.now() - expires_at).total_seconds()
    decision = response.json()["decisions"][0]
    assert decision["decision"] == "expired"
    assert decision["message"] == approval.rejection_message
    assert 0 <= late < 1.0, f"answered {late:.2f} s after the expiry"


async def test_wait_0_answers_at_once_and_a_held_poll_ends_at_its_wait(setup):
    run, approval, headers = setup
    started = time.perf_counter()
    response = await start_poll(headers, 0)
    # Not held: a poll that ignored wait=0 would be held for the longest wait (30 s). The bound
    # is far from both, so a loaded machine (the request itself taking seconds) cannot fail it.
    assert time.perf_counter() - started < 10.0
    assert response.json()["pending"] == ["call_poll"]
    started = time.perf_counter()
    response = await start_poll(headers, 1)
    held = time.perf_counter() - started
    assert 0.95 <= held < 10.0  # held for its wait (not 30 s; generous: a loaded machine)
    assert response.json() == {
        "complete": False,
        "decisions": [],
        "pending": ["call_poll"],
        "cursor": "0",
    }


async def test_a_lost_wake_only_delays_the_answer(setup, reviewer_a, monkeypatch):
    """With the channel layer silent, the database re-check still answers."""
    from console.live import realtime

    run, approval, headers = setup
    monkeypatch.setattr(realtime, "_send", lambda groups, message: None)
    poll = start_poll(headers, 10)
    await asyncio.sleep(0.3)
    await sync_to_async(approval_decide)(approval=approval, viewer=reviewer_a, decision="approve")
    started = time.perf_counter()
    response = await asyncio.wait_for(poll, 3)
    assert time.perf_counter() - started < 1.0
    assert response.json()["decisions"][0]["decision"] == "approved"


async def test_another_tenants_run_is_404_without_waiting(setup, tenant_b):
    key = await sync_to_async(make_key)(tenant_b, scopes=("ingest",))
    started = time.perf_counter()
    response = await start_poll({"Authorization": f"Bearer {key}"}, 10)
    assert response.status_code == 404
    assert time.perf_counter() - started < 5.0  # not held for its 10 s (generous: load)


async def test_a_decide_only_key_is_403(setup, tenant_a, reviewer_a):
    key = await sync_to_async(make_key)(tenant_a, scopes=("decide",), principal=reviewer_a)
    response = await start_poll({"Authorization": f"Bearer {key}"}, 5)
    assert response.status_code == 403


async def test_after_a_decision_the_answer_with_after_replays_it(setup, reviewer_a):
    run, approval, headers = setup
    await sync_to_async(approval_decide)(approval=approval, viewer=reviewer_a, decision="approve")
    first = (await start_poll(headers, 5)).json()
    assert [d["toolCallId"] for d in first["decisions"]] == ["call_poll"]
    replay = (await start_poll(headers, 5, after="0")).json()
    assert [d["toolCallId"] for d in replay["decisions"]] == ["call_poll"]
    assert (await start_poll(headers, 5, after=first["cursor"])).json()["decisions"] == []


async def test_static_files_are_still_served_on_the_async_path():
    """The async-capable WhiteNoise (console.middleware) that keeps long-polls off the
    thread-sensitive worker still serves static files."""
    response = await AsyncClient().get("/static/js/inbox.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert b"json" in body.lower()


async def test_a_held_poll_does_not_block_other_requests(setup, tenant_a, reviewer_a):
    run, approval, headers = setup
    key = await sync_to_async(make_key)(tenant_a, scopes=("decide",), principal=reviewer_a)
    poll = start_poll(headers, 6)
    await asyncio.sleep(0.3)
    other = await AsyncClient().get(
        "/api/v1/approvals", headers={"Authorization": f"Bearer {key}"}
    )  # a sync view: it needs the thread a sync-only middleware would give the poll
    assert other.status_code == 200
    assert not poll.done()  # answered while the poll is still held (for 6 s)
    assert (await poll).status_code == 200


async def test_answering_tells_reviewers_the_runtime_picked_the_decision_up(
    setup, reviewer_a, monkeypatch
):
    from console.live import realtime

    run, approval, headers = setup
    await sync_to_async(approval_decide)(approval=approval, viewer=reviewer_a, decision="approve")
    sent = []
    monkeypatch.setattr(realtime, "_send", lambda groups, message: sent.append(message))
    response = await start_poll(headers, 5)
    assert response.json()["decisions"][0]["approvalId"] == approval.public_id
    for _ in range(50):  # the hint follows the answer
        if sent:
            break
        await asyncio.sleep(0.02)
    assert {m["change"] for m in sent} == {"delivered"}
    assert sent[0]["approvals"] == [approval.public_id]
    stored = await sync_to_async(Approval.objects.get)(pk=approval.pk)
    assert stored.delivered_at is not None


@pytest.mark.postgres
async def test_a_held_poll_holds_no_database_connection_between_its_reads(setup):
    """Each read of a long-poll gives its connection back (to the pool): a thousand held
    polls must not hold a thousand connections. (SQLite's in-memory test database is never
    closed, so this is PostgreSQL's.)"""
    from django.db import connections

    from console.core.db import released

    def read():
        wrapper = connections["default"]
        wrapper.ensure_connection()
        return wrapper

    wrapper = await released(read)()
    assert wrapper.connection is None
