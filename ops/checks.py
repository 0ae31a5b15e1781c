"""What `/readyz` checks: the database answers, every migration this code knows is applied,
Redis answers (when configured), a worker passed recently, and this process is warm and not
shutting down. Each check says "ok" or why not; none reveals a tenant."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection
from django.utils import timezone

from console.db import unreachable
from ops.context import Lifecycle

log = logging.getLogger(__name__)
OK = "ok"
_leaves: list[tuple[str, str]] | None = None
_leaves_lock = threading.Lock()
_redis = None


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


def _database() -> tuple[str, str, float | None]:
    """(database, migrations, seconds since the worker's last pass or None)."""
    leaves = migration_leaves()
    try:
        with connection.cursor() as cursor:
            where = " OR ".join(["(app = %s AND name = %s)"] * len(leaves)) or "FALSE"
            params = [part for leaf in leaves for part in leaf]
            cursor.execute(f"SELECT count(*) FROM django_migrations WHERE {where}", params)  # noqa: S608
            applied = cursor.fetchone()[0]
    except Exception as exc:
        if not unreachable(exc):  # it answered: no migrations table, say
            return OK, f"not applied ({type(exc).__name__})", None
        log.warning("readiness: the database did not answer: %s", type(exc).__name__)
        return f"unreachable ({type(exc).__name__})", "unknown (database unreachable)", None
    missing = len(leaves) - applied
    if missing:
        return OK, f"{missing} app(s) with unapplied migrations", None
    from ops.models import WorkerHeartbeat

    last = (
        WorkerHeartbeat.objects.order_by("-last_pass_at")
        .values_list("last_pass_at", flat=True)
        .first()
    )
    age = None if last is None else max(0.0, (timezone.now() - last).total_seconds())
    return OK, OK, age


def _redis_check() -> str:
    if not settings.REDIS_URL:
        return "not configured"
    global _redis
    try:
        if _redis is None:
            import redis

            _redis = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
            )
        _redis.ping()
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


def readiness() -> tuple[bool, dict[str, str]]:
    database, migrations, age = _database()
    checks = {
        "database": database,
        "migrations": migrations,
        "redis": _redis_check(),
        "worker": _worker(age, migrations),
    }
    ready = all(v in (OK, "not configured") for v in checks.values())
    state = Lifecycle.state()
    if state is not None:
        checks["server"] = state
        ready = False
    return ready, checks
