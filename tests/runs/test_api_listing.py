"""The run list (GET /api/v1/runs): newest first, filters, the opaque cursor, bad
parameters, and its fixed query count."""

import pytest

from tests.support.batches import RUNS, approval_requested, new_run, post_events

pytestmark = pytest.mark.django_db


def test_list_newest_first_with_filters_and_an_opaque_cursor(ingest_a):
    for i in range(5):
        ingest_a.post(
            RUNS,
            new_run(
                f"run_{i}",
                startedAt=f"2026-12-02T10:0{i}:00Z",
                principalId="bob" if i % 2 else "alice",
            ),
        )
    page = ingest_a.get(RUNS, limit=2).json()
    assert [r["id"] for r in page["items"]] == ["run_4", "run_3"]
    page2 = ingest_a.get(RUNS, limit=2, cursor=page["nextCursor"]).json()
    assert [r["id"] for r in page2["items"]] == ["run_2", "run_1"]
    page3 = ingest_a.get(RUNS, limit=2, cursor=page2["nextCursor"]).json()
    assert [r["id"] for r in page3["items"]] == ["run_0"] and page3["nextCursor"] is None
    bobs = ingest_a.get(RUNS, principalId="bob").json()["items"]
    assert [r["id"] for r in bobs] == ["run_3", "run_1"]
    assert ingest_a.get(RUNS, agentId="support-bot", status="done").json()["items"] == []
    assert len(ingest_a.get(RUNS, conversationId="conv_42").json()["items"]) == 5


def test_list_bad_cursor_and_bad_filters_are_422(ingest_a):
    response = ingest_a.get(RUNS, cursor="not-a-cursor")
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "query.cursor"
    assert ingest_a.get(RUNS, status="sleeping").status_code == 422
    assert ingest_a.get(RUNS, limit=0).status_code == 422


def test_list_costs_a_fixed_number_of_queries(ingest_a, django_assert_max_num_queries):
    for i in range(6):
        ingest_a.post(RUNS, new_run(f"run_{i}"))
        post_events(ingest_a, [approval_requested(1, f"c{i}")], run_id=f"run_{i}")
    with django_assert_max_num_queries(6):
        items = ingest_a.get(RUNS).json()["items"]
    assert all(len(r["pendingCalls"]) == 1 for r in items)
