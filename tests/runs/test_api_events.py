"""Event batches (POST /api/v1/runs/{runId}/events) as a log: seq rules, gaps, replays,
conflicts, all-or-nothing batches, publishing on commit, and the cost of a batch."""

import json

import pytest

from runs.models import Message, Run, RunEvent, Step, UsageDaily
from tests.support.batches import RUNS, approval_requested, finished, post_events, step_events

pytestmark = pytest.mark.django_db


def test_events_apply_and_answer_last_seq(ingest_a, admitted):
    response = post_events(ingest_a, step_events(1, 1))
    assert response.status_code == 200
    assert response.json() == {"lastSeq": 3}
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["lastSeq"] == 3 and run["steps"] == 1
    assert run["usage"] == {"inputTokens": 10, "outputTokens": 5, "costMinorUnits": 3}
    assert RunEvent.objects.count() == 3
    assert Message.objects.get().content == [{"type": "text", "text": "hello"}]


def test_replayed_batch_is_harmless_and_a_different_event_at_a_held_seq_is_409(ingest_a, admitted):
    batch = step_events(1, 1)
    post_events(ingest_a, batch)
    assert post_events(ingest_a, batch).json() == {"lastSeq": 3}
    assert RunEvent.objects.count() == 3 and Message.objects.count() == 1
    # A retry overlapping the held tail plus new events applies only the new ones.
    overlap = [*batch[1:], *step_events(4, 2)]
    assert post_events(ingest_a, overlap).json() == {"lastSeq": 6}
    assert Step.objects.count() == 2 and Message.objects.count() == 2
    changed = [dict(batch[1], message={"role": "user", "content": "other"})]
    response = post_events(ingest_a, changed)
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "seq_conflict"
    assert error["details"]["seq"] == 2
    assert error["details"]["held"]["message"]["role"] == "assistant"


def test_a_gap_is_409_with_expected_seq(ingest_a, admitted):
    post_events(ingest_a, step_events(1, 1))
    response = post_events(ingest_a, step_events(7, 2))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "seq_gap"
    assert response.json()["error"]["details"]["expectedSeq"] == 4
    assert RunEvent.objects.count() == 3


def test_seqs_within_a_batch_must_increase_by_one(ingest_a, admitted):
    batch = step_events(1, 1)
    batch[2]["seq"] = 5
    response = post_events(ingest_a, batch)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "events.2.seq"
    assert not RunEvent.objects.exists()


def test_unknown_event_type_and_bad_fields_are_422_with_paths(ingest_a, admitted):
    response = post_events(ingest_a, [{"seq": 1, "type": "step.exploded", "step": 1}])
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"].startswith("events.0")
    bad = step_events(1, 1)
    bad[2]["usage"]["inputTokens"] = -1
    response = post_events(ingest_a, bad)
    paths = [d["path"] for d in response.json()["error"]["details"]]
    assert response.status_code == 422
    assert any(p.startswith("events.2") and p.endswith("usage.inputTokens") for p in paths)
    assert post_events(ingest_a, []).status_code == 422
    too_many = [{"seq": i + 1, "type": "todos.updated", "todos": []} for i in range(501)]
    assert post_events(ingest_a, too_many).status_code == 422


def test_a_failing_batch_writes_nothing(ingest_a, admitted):
    post_events(ingest_a, step_events(1, 1))
    batch = [
        *step_events(4, 2),
        {
            "seq": 7,
            "type": "todos.updated",
            "todos": [{"id": "t", "content": "x", "status": "done"}],
        },
        finished(8),
        {
            "seq": 9,
            "type": "verdict",
            "turn": "2:0",
            "verdict": "flagged",
            "guard": "g",
            "reason": "r",
        },
    ]
    response = post_events(ingest_a, batch)
    assert response.status_code == 409  # an event after run.finished in the same batch
    assert response.json()["error"]["code"] == "run_finished"
    run = Run.objects.get()
    assert (run.last_seq, run.status, run.todos, run.input_tokens) == (3, "running", [], 10)
    assert RunEvent.objects.count() == 3 and Step.objects.count() == 1
    assert UsageDaily.objects.get().input_tokens == 10


def test_event_after_run_finished_is_409_but_a_full_replay_is_200(ingest_a, admitted):
    batch = [*step_events(1, 1), finished(4)]
    assert post_events(ingest_a, batch).status_code == 200
    assert post_events(ingest_a, batch).json() == {"lastSeq": 4}
    response = post_events(ingest_a, step_events(5, 2))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_finished"
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["status"] == "done" and run["result"] == {"text": "bye"}
    assert run["finishedAt"] is not None


def test_realtime_is_published_on_commit(
    ingest_a, admitted, django_capture_on_commit_callbacks, monkeypatch
):
    from console.live import realtime

    sent = []
    monkeypatch.setattr(
        realtime, "_send", lambda groups, message: sent.extend((g, message) for g in groups)
    )
    with django_capture_on_commit_callbacks(execute=True):
        post_events(ingest_a, [*step_events(1, 1), approval_requested(4, "call_a")])
    types = [m["type"] for _, m in sent]
    assert "run.updated" in types and "approvals.updated" in types
    update = next(m for _, m in sent if m["type"] == "run.updated")
    assert update["run"] == "run_1" and update["seq"] == 4
    assert {"steps", "messages", "usage", "approvals"} <= set(update["what"])
    assert all("hello" not in json.dumps(m) for _, m in sent), "no tenant content on the layer"


def test_nothing_is_published_when_the_batch_fails(
    ingest_a, admitted, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        post_events(ingest_a, step_events(9, 1))
    assert callbacks == []


def test_a_batch_costs_a_fixed_number_of_queries(ingest_a, admitted, django_assert_max_num_queries):
    batch = []
    for step in range(1, 101):
        batch += step_events(len(batch) + 1, step)
    with django_assert_max_num_queries(20):
        assert post_events(ingest_a, batch).json() == {"lastSeq": 300}
    assert Step.objects.count() == 100 and Message.objects.count() == 100
