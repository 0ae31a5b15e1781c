"""console.core.rows: rows in bulk as one JSON parameter."""

import datetime
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Approval
from console.core.rows import instances_insert, json_text
from tests.support.factories import ApprovalFactory, RunFactory


def test_json_text_keeps_microseconds_on_the_standard_encoders_path_too():
    at = datetime.datetime(2026, 12, 6, 13, 45, 1, 123456, tzinfo=datetime.UTC)
    fast = json.loads(json_text({"at": at, "n": 1}))
    slow = json.loads(json_text({"at": at, "n": 2**70}))  # orjson refuses: the fallback
    assert fast["at"] == slow["at"] and datetime.datetime.fromisoformat(slow["at"]) == at
    assert slow["n"] == 2**70


@pytest.mark.django_db
def test_instances_insert_gives_each_instance_its_own_row_and_key(tenant_a):
    """One INSERT (on PostgreSQL one JSON parameter, the keys matched back by `key`): each
    instance gets the primary key of the row holding its own values, as bulk_create does."""
    run = RunFactory(tenant=tenant_a, external_id="run_rows")
    now = timezone.now()
    made = [
        ApprovalFactory.build(
            run=run,
            position=n,
            tool_call_id=f"call_{n}",
            arguments={"n": n, "big": 2**70 if n == 2 else n, "text": "é ✓"},
            expires_at=now + datetime.timedelta(minutes=5),
        )
        for n in range(1, 4)
    ]
    with CaptureQueriesContext(connection) as written:
        instances_insert(made, key="public_id")
    assert len([q for q in written.captured_queries if q["sql"].startswith("INSERT")]) == 1
    for obj in made:
        assert obj.pk is not None and not obj._state.adding
        stored = Approval.objects.get(pk=obj.pk)
        assert (stored.public_id, stored.tool_call_id, stored.arguments) == (
            obj.public_id,
            obj.tool_call_id,
            obj.arguments,
        )
        assert stored.expires_at == obj.expires_at and stored.status == "pending"
    instances_insert([], key="public_id")  # nothing to do
