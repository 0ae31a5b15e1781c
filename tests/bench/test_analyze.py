"""`make bench` analyzes the shared benchmark database before each benchmark
(bench._support.analyze), so none measures plans made from what an earlier one left stale."""

import time

import pytest
from django.db import connection

from bench import _support

pytestmark = pytest.mark.django_db(transaction=True)

LAST = "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'approvals_approval'"


def _url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _last_analyze():
    with connection.cursor() as cursor:
        cursor.execute(LAST)
        return cursor.fetchone()[0]


def test_analyze_refreshes_the_statistics_of_the_benchmark_database(monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("ANALYZE is PostgreSQL's (DATABASE_URL unset: the tests run on SQLite)")
    before = _last_analyze()
    monkeypatch.setenv("DATABASE_URL", _url())
    took = _support.analyze()
    assert took is not None and took >= 0
    deadline = time.monotonic() + 5  # the statistics of another session are flushed within 1 s
    while _last_analyze() in (None, before) and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _last_analyze()
    assert after is not None and after != before


def test_analyze_without_a_postgresql_database_does_nothing(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "sqlite:///var/nothing.sqlite3")
    assert _support.analyze() is None
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gavel_no_such_db_x")
    assert _support.analyze() is None  # not created yet: nothing to analyze
