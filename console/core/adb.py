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
import weakref

from django.conf import settings
from django.db import connections

from console.core.db import unreachable

_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> pool


def usable() -> bool:
    """Is the async path usable from here, now?"""
    if not getattr(settings, "GAVEL_ASYNC_READS", True):
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
    """A few idle async connections of one event loop, reused: no background tasks (a pool
    with workers would outlive a test's loop), a broken one is closed instead of kept."""

    def __init__(self, limit: int, durable: bool):
        self.limit = limit
        self.durable = durable
        self.idle: list = []

    async def take(self):
        import psycopg

        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        return await psycopg.AsyncConnection.connect(**_connect_kwargs(self.durable))

    async def give_back(self, conn, *, broken: bool) -> None:
        import psycopg

        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if broken or conn.closed or not idle or len(self.idle) >= self.limit:
            await conn.close()
        else:
            self.idle.append(conn)


def _connections(durable: bool) -> _Connections:
    loop = asyncio.get_running_loop()
    kinds = _pools.get(loop)
    if kinds is None:
        kinds = _pools[loop] = {}
    held = kinds.get(durable)
    if held is None:
        limit = getattr(settings, "GAVEL_ASYNC_READS_IDLE", 4)
        held = kinds[durable] = _Connections(limit, durable)
    return held


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
                held.idle.pop().pgconn.finish()
    _pools.clear()


__all__ = ["discard_all", "fetch", "unreachable", "usable"]
