"""What `/readyz` checks: the database answers, every migration this code knows is applied,
Redis answers (when configured), a worker passed recently, and this process is warm and not
shutting down. Each check says "ok" or why not; none reveals a tenant.

On PostgreSQL the database's part is one statement on the event loop (console/adb.py: no
thread hop); elsewhere (SQLite, a test's transaction) the ORM's connection in a thread. Redis
is pinged with redis-py's asyncio client (a 1 s timeout), so an unreachable Redis never blocks
the loop."""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.utils import timezone

from console.core import adb
from console.core.db import unreachable
from ops.context import Lifecycle

log = logging.getLogger(__name__)
OK = "ok"
_leaves: list[tuple[str, str]] | None = None
_leaves_lock = threading.Lock()
_redis: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> client


def migration_leaves() -> list[tuple[str, str]]:
    """The last migration of each app in this code (loaded once: the code does not change).
    All applied ⇒ every migration is, since each needs the ones before it."""
    global _leaves
    with _leaves_lock:
        if _leaves is None:
            from django.db.migrations.loader import MigrationLoader

            loader = MigrationLoader(None, ignore_no_migrations=True)
            _leaves = sorted(loader.graph.leaf_nodes())
        return _leaves


def _sql() -> tuple[str, list]:
    """One statement: how many of the leaves are applied, and the freshest heartbeat."""
    from ops.models import WorkerHeartbeat

    leaves = migration_leaves()
    where = " OR ".join(["(app = %s AND name = %s)"] * len(leaves)) or "FALSE"
    table = connection.ops.quote_name(WorkerHeartbeat._meta.db_table)
    sql = (
        f"SELECT (SELECT count(*) FROM django_migrations WHERE {where}), "  # noqa: S608
        f"(SELECT max(last_pass_at) FROM {table})"
    )
    return sql, [part for leaf in leaves for part in leaf]


def _judge(row: tuple | None, exc: BaseException | None) -> tuple[str, str, float | None]:
    """(database, migrations, seconds since the worker's last pass or None)."""
    if exc is not None:
        if not unreachable(exc):  # it answered: no migrations or heartbeat table yet
            return OK, f"not applied ({type(exc).__name__})", None
        log.warning("readiness: the database did not answer: %s", type(exc).__name__)
        return f"unreachable ({type(exc).__name__})", "unknown (database unreachable)", None
    applied, last = row
    missing = len(migration_leaves()) - applied
    if missing:
        return OK, f"{missing} app(s) with unapplied migrations", None
    if isinstance(last, str):  # SQLite answers text
        last = datetime.fromisoformat(last)
    if last is not None and timezone.is_naive(last):
        last = last.replace(tzinfo=UTC)
    age = None if last is None else max(0.0, (timezone.now() - last).total_seconds())
    return OK, OK, age


def _database_sync() -> tuple[str, str, float | None]:
    try:
        sql, params = _sql()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
    except Exception as exc:
        return _judge(None, exc)
    return _judge(row, None)


async def _database() -> tuple[str, str, float | None]:
    if adb.usable():
        try:
            sql, params = _sql()
            rows = await adb.fetch(sql, params)
        except Exception as exc:
            return _judge(None, exc)
        return _judge(rows[0], None)
    return await sync_to_async(_database_sync)()


async def _redis_check() -> str:
    if not settings.REDIS_URL:
        return "not configured"
    loop = asyncio.get_running_loop()
    try:
        client = _redis.get(loop)
        if client is None:
            import redis.asyncio

            client = _redis[loop] = redis.asyncio.Redis.from_url(
                settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
            )
        await asyncio.wait_for(client.ping(), 2)
    except Exception as exc:
        log.warning("readiness: Redis did not answer: %s", type(exc).__name__)
        return f"unreachable ({type(exc).__name__})"
    return OK


def _worker(age: float | None, migrations: str) -> str:
    if migrations != OK:
        return "unknown (migrations)"
    if age is None:
        return "no heartbeat"
    if age > settings.GAVEL_WORKER_STALE_SECONDS:
        return f"no heartbeat for {int(age)} s"
    return OK


async def readiness() -> tuple[bool, dict[str, str]]:
    (database, migrations, age), redis = await asyncio.gather(_database(), _redis_check())
    checks = {
        "database": database,
        "migrations": migrations,
        "redis": redis,
        "worker": _worker(age, migrations),
    }
    ready = all(v in (OK, "not configured") for v in checks.values())
    state = Lifecycle.state()
    if state is not None:
        checks["server"] = state
        ready = False
    return ready, checks
