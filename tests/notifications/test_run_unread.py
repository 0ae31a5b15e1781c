"""Mail of new calls and a Slack button press read the calls with their runs but never a run's
snapshot or its other JSON (approvals.models.RUN_UNREAD: a long conversation's snapshot is
hundreds of KB), and load none of it later (no second read of a run)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.notifications.test_call_mail import admit, call, hold, people, send_all  # noqa: F401
from tests.notifications.test_slack_actions import held, post, press  # noqa: F401
from tests.support.queries import reading_run_json

pytestmark = pytest.mark.django_db


def unread(queries) -> list[str]:
    """The statements that read a run's snapshot or limits with a call, or a run again."""
    sqls = [q["sql"] for q in queries.captured_queries]
    with_calls = [s for s in sqls if 'FROM "approvals_approval"' in s]
    again = [s for s in sqls if s.startswith('SELECT "runs_run"."id"') and 'FROM "runs_run"' in s]
    return reading_run_json(with_calls) + again


@pytest.mark.usefixtures("people")
def test_the_mail_of_new_calls_reads_no_runs_snapshot(ingest_a, smtp_server, use_email_url):
    use_email_url(smtp_server.url)
    admit(ingest_a)
    hold(ingest_a, [call(1), call(2)])
    with CaptureQueriesContext(connection) as queries:
        send_all()
    assert len(smtp_server.inbox.messages) == 2  # the reviewer and the lead: the mail went
    assert any('FROM "approvals_approval"' in q["sql"] for q in queries.captured_queries)
    assert unread(queries) == []


def test_a_slack_press_reads_no_runs_snapshot(client, held):  # noqa: F811
    held.run.snapshot = {"messages": [{"role": "user", "content": "x" * 400}] * 300}
    held.run.save(update_fields=["snapshot"])
    with CaptureQueriesContext(connection) as queries:
        response = post(client, press(held))
    assert response.status_code == 200, response.content
    held.refresh_from_db()
    assert held.status == "approved"
    assert unread(queries) == []
