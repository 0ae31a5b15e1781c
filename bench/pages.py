"""Run list pages at volume: /runs/ (first page, a filtered page, an older page) with 100,000
runs and ~1,000,000 events on PostgreSQL, against the raw SQL of the same keyset query.

Server time is measured in-process through Django's full stack (middleware, session, auth,
access checks, the selectors, template rendering), DEBUG off. The baseline, in the same run and
database, executes the page's own run-list SQL (captured from the page itself) over a plain
psycopg connection: the floor a page cannot beat. Each figure is the median of ROUNDS.

The data is seeded once (`manage.py seed_demo`) into a dedicated database and reused:
BENCH_PAGES_DB (default gavel_bench_pages) on the server of DATABASE_URL.
Knobs (env): BENCH_PAGES_RUNS (100000), BENCH_PAGES_ROUNDS (25).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

from bench import _support

TENANT = "bench-pages"
VIEWER = "bench-viewer@example.com"
TARGET_MS = 100.0


def _bench_db_url() -> str:
    parts = urlsplit(_support.database_url())
    name = os.environ.get("BENCH_PAGES_DB", "gavel_bench_pages")
    return urlunsplit(parts._replace(path=f"/{name}"))


def _ensure_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def main() -> None:
    url = _bench_db_url()
    _ensure_database(url)
    env = _support.server_env(DATABASE_URL=url, ALLOWED_HOSTS="testserver,127.0.0.1")
    _support.manage("migrate", "--verbosity", "0", env=env)
    done = subprocess.run(
        [_support.PYTHON, "-m", "bench.pages", "--measure"], cwd=_support.ROOT, env=env, check=False
    )
    if done.returncode:
        sys.exit(done.returncode)


# --- in the child process (Django set up against the bench database) ---


def _seed_if_needed(runs: int) -> None:
    from django.core.management import call_command

    from console.models import Tenant
    from runs.models import Run

    tenant = Tenant.objects.filter(slug=TENANT).first()
    have = Run.objects.filter(tenant=tenant).count() if tenant else 0
    if have < runs:
        print(f"seeding {runs - have} runs into '{TENANT}' (once; reused next time)", flush=True)
        call_command("seed_demo", runs=runs - have, tenant=TENANT, principals=500, seed=7)


def _viewer_client():
    from django.test import Client

    from console.models import Tenant
    from console.services import principal_create

    tenant = Tenant.objects.get(slug=TENANT)
    principal = tenant.principals.filter(external_id=VIEWER).first()
    if principal is None or principal.user is None:
        principal, _ = principal_create(
            tenant=tenant, external_id=VIEWER, password="bench-pass-123", roles=["viewer"]
        )
    client = Client()
    client.force_login(principal.user)
    return client


def _time_page(client, path: str, rounds: int) -> tuple[float, float, float, int, str]:
    """(median ms, min ms, median CPU ms of this process, queries, the run-list SQL)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(path)  # warm: templates, caches, plans
    walls, cpus = [], []
    for _ in range(rounds):
        started, cpu = time.perf_counter(), time.process_time()
        response = client.get(path)
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    with CaptureQueriesContext(connection) as ctx:
        client.get(path)
    sql = next(q["sql"] for q in ctx.captured_queries if 'FROM "runs_run"' in q["sql"])
    med = _support.median
    return med(walls), min(walls), med(cpus), len(ctx.captured_queries), sql


def _time_sql(url: str, sql: str, rounds: int) -> float:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(sql).fetchall()
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            conn.execute(sql).fetchall()
            times.append((time.perf_counter() - started) * 1000)
    return _support.median(times)


def _older_path(client) -> str:
    import re

    html = client.get("/runs/").content.decode()
    return re.search(r'href="(/runs/\?[^"]*before=[^"]+)"', html).group(1).replace("&amp;", "&")


def measure() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    django.setup()
    from django.conf import settings

    from runs.models import Run, RunEvent

    runs = int(os.environ.get("BENCH_PAGES_RUNS", "100000"))
    rounds = int(os.environ.get("BENCH_PAGES_ROUNDS", "25"))
    _seed_if_needed(runs)
    counts = f"{Run.objects.count()} runs, {RunEvent.objects.count()} events"
    print(f"data: {counts}; DEBUG={settings.DEBUG}")
    client = _viewer_client()
    url = os.environ["DATABASE_URL"]
    pages = {
        "first page (50)": "/runs/",
        "first page (200)": "/runs/?limit=200",
        "filtered (status+agent)": "/runs/?status=awaiting_approval&agent=billing-bot",
        "filtered (principal)": "/runs/?principal=user0042@example.com&group=conversation",
        "older page": _older_path(client),
    }
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    header = f"{'page':26} {'median ms':>9} {'min ms':>7} {'CPU ms':>7} {'queries':>7}"
    print(f"{header} {'raw SQL ms':>10} {'ratio':>6}")
    slowest = 0.0
    for label, path in pages.items():
        ms, fastest, cpu, queries, sql = _time_page(client, path, rounds)
        raw = _time_sql(url, sql, rounds)
        if "200" not in label:  # the target is for a page of the default size
            slowest = max(slowest, ms)
        row = f"{label:26} {ms:9.1f} {fastest:7.1f} {cpu:7.1f} {queries:7d}"
        print(f"{row} {raw:10.2f} {ms / raw:5.1f}x", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    verdict = "meets" if slowest < TARGET_MS else "MISSES"
    print(
        f"slowest default-size page {slowest:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target "
        f"(median of {rounds}; CPU ms = this process's CPU time per request, which contention "
        "on a shared machine does not inflate)"
    )


if __name__ == "__main__":
    if "--measure" in sys.argv:
        measure()
    else:
        main()
