"""PostgreSQL prepares the statements a connection runs again and again (DB_PREPARED_STATEMENTS,
on by default): after DB_PREPARE_THRESHOLD runs, the same ORM query is parsed and planned once
on that connection, and answers the same rows."""

from __future__ import annotations

import pytest
from django.db import connection

from approvals.models import Approval
from tests.support.factories import ApprovalFactory

pytestmark = [pytest.mark.postgres]


def _prepared(fragment: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        return cursor.fetchone()[0]


def test_a_query_run_again_is_prepared_and_answers_the_same(db, on_postgres):
    if not on_postgres:
        pytest.skip("needs PostgreSQL: SQLite has no server-side prepared statements")
    threshold = connection.settings_dict["OPTIONS"]["prepare_threshold"]
    approval = ApprovalFactory()
    answers = []
    for _ in range(threshold + 1):
        found = Approval.objects.with_run().filter(public_id=approval.public_id).first()
        answers.append((found.pk, found.run.pk, found.run.tenant_id))
    assert answers == [(approval.pk, approval.run_id, approval.tenant_id)] * (threshold + 1)
    assert _prepared('FROM "approvals_approval" INNER JOIN "runs_run"') >= 1
    # A parameter is still a parameter: another call's id finds that call, not the first.
    other = ApprovalFactory(run=approval.run)
    found = Approval.objects.with_run().filter(public_id=other.public_id).first()
    assert found.pk == other.pk != approval.pk
