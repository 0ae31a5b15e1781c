"""The server SIGKILLed 10 times while a `gavel_sdk` client ingests 100,000 events (four runs
streamed at once, 500 events a request): afterwards the database holds every event exactly
once, at its seq, in order, and the rows derived from them (messages) exactly once too.
Counted in the database itself, not through the API."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from gavel_sdk import GavelClient, RetryPolicy, RunEvents

from tests.support.live_console import LiveConsole

pytestmark = [pytest.mark.postgres, pytest.mark.outage]

EVENTS = 100_000
RUNS = 4  # streamed at once, one client (one writer) each
KILLS = 10
PER_RUN = EVENTS // RUNS
# Restarts take a few seconds: retry quickly, and long enough to outlast one.
RETRY = RetryPolicy(attempts=200, base=0.05, cap=0.5)


def _events(run_id: str) -> list[dict]:
    events = RunEvents(agent_id="kill-bot", model="m")
    events.step_started()  # seq 1; the messages follow at seq 2 ..
    for i in range(PER_RUN):
        events.message("assistant", f"{run_id}:{i}")
    return events.drain()


def _killer(console, progress, done: threading.Event, kills: list) -> None:
    """SIGKILL the server each time the ingest passes one more tenth, then start it again."""
    for n in range(1, KILLS + 1):
        threshold = EVENTS * n / (KILLS + 1)
        while progress() < threshold and not done.is_set():
            time.sleep(0.01)
        if done.is_set():
            return
        console.stop(kill=True)
        kills.append(progress())
        time.sleep(0.2)
        console.start(timeout=60)


COUNTS = """
SELECT r.external_id,
       (SELECT count(*) FROM runs_runevent e WHERE e.run_id = r.id),
       (SELECT count(*) FROM runs_runevent e WHERE e.run_id = r.id AND e.type = 'message'
          AND e.data -> 'message' ->> 'content' = r.external_id || ':' || (e.seq - 2)),
       (SELECT min(seq) || '..' || max(seq) FROM runs_runevent e WHERE e.run_id = r.id),
       (SELECT count(*) FROM runs_message m WHERE m.run_id = r.id),
       (SELECT count(*) FROM runs_message m WHERE m.run_id = r.id
          AND m.content #>> '{}' = r.external_id || ':' || m.position),
       r.last_seq
FROM runs_run r WHERE r.external_id LIKE 'run_kill_%' ORDER BY r.external_id
"""


def test_100000_events_land_exactly_once_across_10_server_kills(tmp_path):
    console = LiveConsole(tmp_path, db_suffix="sigkill")
    if not console.env.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    console.env["DEBUG"] = "0"  # as deployed (DEBUG keeps every query of a request)
    console.provision()
    console.start()
    run_ids = [f"run_kill_{n}" for n in range(RUNS)]
    clients = [GavelClient(console.url, console.ingest_key, retry=RETRY) for _ in run_ids]
    done, kills, sent, errors = threading.Event(), [], {}, []

    def progress() -> int:
        return sum(c.last_seq(r) or 0 for c, r in zip(clients, run_ids, strict=True))

    def stream(client, run_id):
        try:
            client.admit_run(run_id, agent_id="kill-bot", principal_id=console.PRINCIPAL)
            sent[run_id] = client.send_events(run_id, _events(run_id))
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        killer = threading.Thread(target=_killer, args=(console, progress, done, kills))
        streams = [
            threading.Thread(target=stream, args=pair)
            for pair in zip(clients, run_ids, strict=True)
        ]
        started = time.monotonic()
        killer.start()
        for thread in streams:
            thread.start()
        for thread in streams:
            thread.join(300)
        ingest_seconds = time.monotonic() - started
        done.set()
        killer.join(120)
        assert not errors, errors
        with psycopg.connect(console.env["DATABASE_URL"]) as conn:
            counts = conn.execute(COUNTS).fetchall()
    finally:
        done.set()
        for client in clients:
            client.close()
        console.stop()

    assert len(kills) == KILLS and all(k < EVENTS for k in kills), kills  # all mid-stream
    assert sent == {run_id: PER_RUN + 1 for run_id in run_ids}
    held = PER_RUN + 1
    assert counts == [
        (run_id, held, PER_RUN, f"1..{held}", PER_RUN, PER_RUN, held) for run_id in run_ids
    ]
    print(f"{EVENTS} events in {ingest_seconds:.1f} s across {KILLS} kills at {kills}")
