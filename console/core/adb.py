"""Reads straight from the event loop, on PostgreSQL: async psycopg, no thread hop.

A held request (the decisions long-poll) wakes on the channel layer and must answer within
milliseconds. Through the ORM, each look costs a hop to a worker thread, a pooled connection's
checkout and Django's query compilation; here it is one round trip on a connection of a small
few connections kept per event loop, with SQL written by the caller from the models' own table
and column names.

`usable()` says when to take this path; callers keep their ORM path as the fallback and use it
whenever this one is not usable (SQLite, `GAVEL_ASYNC_READS=0`, or a connection inside a
transaction: a test's data is visible only there) or fails (`unreachable`: the ORM path then
answers the request, a 503 included when the database is down).
"""

from __future__ import annotations

import asyncio
import time
import weakref

from django.conf import settings
from django.db import connections

from console.core.db import unreachable

_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> pool


def usable() -> bool:
    """Is the async path usable from here, now?"""
    if not settings.GAVEL_ASYNC_READS:
        return False
    if connections["default"].vendor != "postgresql":
        return False
    # A connection of this context inside a transaction (a test's): what it wrote is visible
    # only to it, so read through it (the ORM path).
    return not any(c.in_atomic_block for c in connections.all(initialized_only=True))


def _connect_kwargs(durable: bool) -> dict:
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)  # Django's; ours are plain psycopg cursors
    options = params.pop("options", "")
    # Aware UTC datetimes, as Django's. Hints (see `fetch`): their commit does not wait for
    # the WAL to reach the disk; a durable write's does, as the ORM's.
    options = f"{options} -c TimeZone=UTC"
    if not durable:
        options += " -c synchronous_commit=off"
    params["options"] = options.strip()
    params["autocommit"] = True  # one statement, its own transaction
    return params


class _Connections:
    """The async connections of one event loop and kind, reused: no background tasks (a pool
    with workers would outlive a test's loop), a broken one is closed instead of kept.

    At most `most` are open at once (GAVEL_ASYNC_READS_MAX): a statement beyond them waits for
    one to be given back, up to `wait` seconds (DB_POOL_TIMEOUT), then fails as the
    database's pool would (psycopg's OperationalError: the caller's ORM path answers). Idle
    ones are kept for the next statement: `keep` of them (GAVEL_ASYNC_READS_IDLE) for good,
    the others while one was used in the last LINGER_SECONDS, so that a burst of concurrent
    calls does not open and close a PostgreSQL backend per statement (8 concurrent clients
    through the MCP gateway did, with 4 kept: ~10 % of the serving process's CPU)."""

    LINGER_SECONDS = 30.0

    def __init__(self, keep: int, most: int, durable: bool, wait: float = 10.0):
        self.keep = keep
        self.most = max(most, 1)
        self.wait = wait
        self.durable = durable
        self.idle: list = []  # (connection, when it was given back), the newest last
        self.slots = asyncio.Semaphore(self.most)

    async def take(self):
        import psycopg

        try:
            await asyncio.wait_for(self.slots.acquire(), self.wait)
        except TimeoutError:
            raise psycopg.OperationalError(
                f"no async database connection free within {self.wait:g} s"
            ) from None
        try:
            while self.idle:
                conn, _ = self.idle.pop()
                if not conn.closed:
                    return conn
            return await psycopg.AsyncConnection.connect(**_connect_kwargs(self.durable))
        except BaseException:
            self.slots.release()
            raise

    async def give_back(self, conn, *, broken: bool) -> None:
        import psycopg

        try:
            idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if broken or conn.closed or not idle:
                await conn.close()
            else:
                now = time.monotonic()
                self.idle.append((conn, now))
                await self._trim(now)
        finally:
            self.slots.release()

    async def _trim(self, now: float) -> None:
        """Close the oldest idle ones beyond `keep` that no statement needed lately."""
        while len(self.idle) > self.keep and self.idle[0][1] < now - self.LINGER_SECONDS:
            conn, _ = self.idle.pop(0)
            await conn.close()


def _connections(durable: bool) -> _Connections:
    loop = asyncio.get_running_loop()
    kinds = _pools.get(loop)
    if kinds is None:
        kinds = _pools[loop] = {}
    held = kinds.get(durable)
    if held is None:
        held = kinds[durable] = _Connections(
            settings.GAVEL_ASYNC_READS_IDLE,
            settings.GAVEL_ASYNC_READS_MAX,
            durable,
            wait=_pool_timeout(),
        )
    return held


def _pool_timeout() -> float:
    pool = connections["default"].settings_dict.get("OPTIONS", {}).get("pool")
    return float(pool.get("timeout", 10)) if isinstance(pool, dict) else 10.0


async def fetch(sql: str, params: list, *, durable: bool = False) -> list[tuple]:
    """The rows of one statement, which commits on its own: a SELECT, or a write with
    RETURNING that is only a hint (the long-poll's pickup mark), committed with
    `synchronous_commit=off` (visible at once, but lost if PostgreSQL itself crashes in the
    next fraction of a second; never corrupted). `durable`: a write that must last and stands
    alone (the gateway's McpCall of a passed call), its commit waiting for the WAL as the
    ORM's does. Anything that belongs to a service's transaction goes through the ORM."""
    held = _connections(durable)
    conn = await held.take()
    broken = True
    try:
        async with conn.cursor() as cursor:
            await cursor.execute(sql, params)
            rows = await cursor.fetchall() if cursor.description else []
        broken = False
        return rows
    finally:
        await held.give_back(conn, broken=broken)


def discard_all() -> None:
    """Close every loop's idle connections at once, from sync code (a test's teardown: its
    loop is gone; a server's connections live as long as its loop)."""
    for kinds in list(_pools.values()):
        for held in kinds.values():
            while held.idle:
                held.idle.pop()[0].pgconn.finish()
    _pools.clear()


__all__ = ["discard_all", "fetch", "unreachable", "usable"]
