"""What captured statements (Django's CaptureQueriesContext) read: shared by the tests that
check a path never loads a run's JSON it does not show (approvals.models.RUN_UNREAD)."""

RUN_JSON = ('"runs_run"."snapshot"', '"runs_run"."limits"')


def reading_run_json(sqls: list[str]) -> list[str]:
    """The statements that select a run's snapshot or limits."""
    return [sql for sql in sqls if any(column in sql for column in RUN_JSON)]
