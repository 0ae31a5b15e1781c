"""The event loop's own connections (console/core/adb.py): never more open at once than
GAVEL_ASYNC_READS_MAX (a statement beyond them waits, then fails as the pool would); a burst's
connections reused by the next burst instead of a PostgreSQL backend opened and closed per
statement; those beyond GAVEL_ASYNC_READS_IDLE closed once no statement needed them lately."""

import asyncio

import psycopg
import pytest

from console.core import adb
from console.core.db import unreachable

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def opened(monkeypatch, settings):
    """Every connection the path opens, counted; the loop's connections fresh for the test."""
    settings.GAVEL_ASYNC_READS_IDLE = 2
    settings.GAVEL_ASYNC_READS_MAX = 4
    adb.discard_all()
    made = []
    connect = psycopg.AsyncConnection.connect

    async def counted(*args, **kwargs):
        conn = await connect(*args, **kwargs)
        made.append(conn)
        return conn

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", counted)
    yield made
    adb.discard_all()


def _open(made) -> int:
    return sum(1 for conn in made if not conn.closed)


async def _burst(n: int, sleep: float = 0.05) -> list:
    return await asyncio.gather(*(adb.fetch("SELECT pg_sleep(%s), 1", [sleep]) for _ in range(n)))


def test_never_more_open_at_once_than_the_most(opened):
    async def main():
        rows = await _burst(12)
        assert [r[0][1] for r in rows] == [1] * 12  # each answered, some after waiting
        assert len(opened) == 4

    asyncio.run(main())


def test_the_next_burst_reuses_the_last_ones_connections(opened):
    async def main():
        await _burst(4)
        await _burst(4)
        await _burst(4)
        assert len(opened) == 4 and _open(opened) == 4  # kept beyond IDLE: used lately

    asyncio.run(main())


def test_those_beyond_idle_are_closed_once_not_needed_lately(opened, monkeypatch):
    async def main():
        await _burst(4)
        assert _open(opened) == 4
        now = adb.time.monotonic()
        monkeypatch.setattr(adb.time, "monotonic", lambda: now + 31)
        await adb.fetch("SELECT 1", [])
        assert _open(opened) == 2 and len(opened) == 4  # IDLE kept for good

    asyncio.run(main())


def test_waiting_past_the_timeout_fails_as_the_pool_would(opened, monkeypatch):
    async def main():
        adb.discard_all()
        held = adb._connections(False)
        monkeypatch.setattr(held, "wait", 0.05)
        slow = asyncio.gather(*(adb.fetch("SELECT pg_sleep(0.5)", []) for _ in range(4)))
        await asyncio.sleep(0.1)  # the four are running
        with pytest.raises(psycopg.OperationalError) as refused:
            await adb.fetch("SELECT 1", [])
        assert unreachable(refused.value)  # the caller's ORM path answers
        await slow
        assert await adb.fetch("SELECT 1", []) == [(1,)]  # free again
        assert len(opened) == 4

    asyncio.run(main())
