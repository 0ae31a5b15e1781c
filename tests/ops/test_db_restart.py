"""A database restart as a server sees it: every backend of a real daphne's pool terminated
(pg_terminate_backend) costs at most one failed request, because pooled connections are
checked before use (CONN_HEALTH_CHECKS). Without the check the audit saw up to 8 × 503."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.live_console import LiveConsole

pytestmark = [pytest.mark.postgres, pytest.mark.outage]

APP_NAME = "gavel-db-restart-test"


def test_terminated_pool_costs_at_most_one_failed_request(db, tmp_path, on_postgres):
    if not on_postgres:
        pytest.skip("needs PostgreSQL: the server's pooled connections are terminated")
    console = LiveConsole(tmp_path, db_suffix="dbrestart")
    console.env.update(PGAPPNAME=APP_NAME, DB_POOL_MIN="4", DB_POOL_MAX="8")
    console.provision()
    console.start()
    try:
        api = console.api()
        api.timeout = 30  # a loaded machine: a slow answer is not a failed one
        for _ in range(20):  # the pool holds several connections
            assert api.get("/api/v1/runs", params={"limit": "1"}).status_code == 200
        url = console.env["DATABASE_URL"]
        base, _, name = url.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND application_name = %s",
                [name, APP_NAME],
            ).fetchall()
        assert killed, "the server held no connection"
        codes = [api.get("/api/v1/runs", params={"limit": "1"}).status_code for _ in range(30)]
        assert codes.count(200) >= 29, codes
        assert set(codes) <= {200, 503}, codes
        assert console.proc.poll() is None
    finally:
        console.stop()
