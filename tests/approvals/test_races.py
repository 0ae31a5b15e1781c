"""Exactly one decision wins: 50 concurrent decide requests on one approval, over 20 approvals.

PostgreSQL only (real row locks and concurrent connections); each request is a real HTTP
request through the API (Django's test client, one thread and one connection per decider).
"""

import threading
from collections import Counter

import pytest
from django.db import connection, connections
from django.test import Client

from approvals.models import Approval, ApprovalStatus
from console.models import AuditEvent
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory, make_key

DECIDERS = 50
APPROVALS = 20


def race(paths: list[str], keys: list[str]) -> list[list[tuple[int, dict]]]:
    """For each path in turn, every key POSTs a decision at the same moment (a barrier per
    round). One thread and one database connection per decider, opened before the race.
    Returns, per path, (status, body) per request."""
    barrier = threading.Barrier(len(keys), timeout=120)  # a failed decider fails the race
    results = [[None] * len(keys) for _ in paths]

    def decider(i, key):
        client = Client()
        decision = "approve" if i % 2 else "deny"
        try:
            connection.ensure_connection()
            for round_, path in enumerate(paths):
                barrier.wait()
                response = client.post(
                    path,
                    {"decision": decision},
                    content_type="application/json",
                    headers={"Authorization": f"Bearer {key}"},
                )
                results[round_][i] = (response.status_code, response.json())
        finally:
            connection.close()

    threads = [threading.Thread(target=decider, args=(i, k)) for i, k in enumerate(keys)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_deciders_exactly_one_wins_over_twenty_approvals(
    tenant_a, monkeypatch, request
):
    # Each decider keeps its connection for the whole race (no reconnect storm on a busy box):
    # from a pool big enough for all of them, or as a persistent connection without one.
    if connection.settings_dict["OPTIONS"].get("pool"):
        pool = connection.pool
        request.addfinalizer(lambda sizes=(pool.min_size, pool.max_size): pool.resize(*sizes))
        stats = pool.get_stats()  # connections other threads of this test session still hold
        held = stats.get("pool_size", 0) - stats.get("pool_available", 0)
        pool.resize(min_size=pool.min_size, max_size=held + DECIDERS + 5)
    else:
        monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 600)
    deciders = [
        PrincipalFactory(tenant=tenant_a, external_id=f"decider{i}@a.example", role="reviewer")
        for i in range(DECIDERS)
    ]
    keys = [make_key(tenant_a, scopes=("decide",), principal=p) for p in deciders]
    run = RunFactory(tenant=tenant_a)
    approvals = [ApprovalFactory(run=run) for _ in range(APPROVALS)]
    paths = [f"/api/v1/approvals/{a.public_id}/decision" for a in approvals]
    for approval, results in zip(approvals, race(paths, keys), strict=True):
        codes = Counter(status for status, _ in results)
        assert codes == {200: 1, 409: DECIDERS - 1}, codes
        winner = next(body for status, body in results if status == 200)
        stored = Approval.objects.select_related("decided_by").get(pk=approval.pk)
        assert winner["decidedBy"] == stored.decided_by.external_id
        assert stored.status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED)
        for status, body in results:
            if status == 409:
                assert body["error"]["details"] == {
                    "decidedBy": stored.decided_by.external_id,
                    "status": stored.status,
                }
        audits = AuditEvent.objects.filter(action="approval.decided", object_id=approval.public_id)
        assert audits.count() == 1
    seqs = sorted(Approval.objects.filter(run=run).values_list("decision_seq", flat=True))
    assert seqs == list(range(1, APPROVALS + 1))  # gap-free cursors, one per decision
