"""bench/ingest.py's baseline writes the same rows the console stores (issue 18): every table
the console writes for a run of the bench's plan is in the baseline's copy, or is the log."""

import pytest
from django.apps import apps

from bench import ingest
from runs.models import Run

pytestmark = pytest.mark.django_db

WRITTEN_ELSEWHERE = {"runs_runevent"}  # the log: the baseline builds it from the events


def test_every_table_the_console_writes_for_a_bench_run_is_copied(ingest_a):
    admission = {"id": "bench_plan", "agentId": "bench-bot", "agentVersion": 1}
    assert ingest_a.post("/api/v1/runs", {**admission, "principalId": "bench@x"}).status_code == 201
    for batch in ingest.run_batches(2):
        response = ingest_a.post("/api/v1/runs/bench_plan/events", {"events": batch})
        assert response.status_code == 200, response.content
    run = Run.objects.get(external_id="bench_plan")
    written = set()
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            related = field.is_relation and field.related_model is Run
            if related and model.objects.filter(**{field.name: run}).exists():
                written.add(model._meta.db_table)
    assert written - WRITTEN_ELSEWHERE, "the plan writes derived rows"
    assert written - WRITTEN_ELSEWHERE <= set(ingest.DERIVED)
    assert {"runs_step", "runs_message", "runs_toolresult", "runs_turnverdict"} <= written
