"""Decision latency: a reviewer's decision POST returning → the runtime's long-poll returning,
through real daphne processes on PostgreSQL (+ the Redis channel layer when REDIS_URL is set),
next to a bare PostgreSQL LISTEN/NOTIFY wake-up measured in the same run.

Each trial: a run holds one call (admitted and requested over HTTP, not timed); a runtime
long-polls `GET /runs/{id}/decisions?wait=10` and is held; then a `decide` key POSTs the
decision. The figure is (poll returned) − (decision POST returned), on one clock (the same
process). It can be negative: the server publishes on commit, before its response is written.
Also printed: decision POST sent → poll returned (the whole path a reviewer waits for).

With REDIS_URL set there are two daphnes: the poll is held on one and the decision lands on
the other, so the wake crosses processes through Redis, as behind a load balancer.

Baseline: LISTEN on one psycopg connection, NOTIFY (autocommit) on another; NOTIFY returning →
the listener's notification arriving, same number of trials.

Knobs (env): BENCH_TRIALS (default 200).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import statistics
import threading
import time

import httpx
import psycopg

from bench import _support

TARGET_P50_MS, TARGET_P99_MS = 10.0, 30.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def provision() -> tuple[str, str]:
    """A tenant, a reviewer and two keys: (ingest key, decide key bound to the reviewer)."""
    _slug, ingest, decide = _support.provision_principal(
        "reviewer@bench", role="reviewer", key_scope="decide"
    )
    return ingest, decide


async def hold_one_call(client: httpx.AsyncClient, run_id: str) -> str:
    """Admit a run and have it request one approval; returns the approval id."""
    admission = {"id": run_id, "agentId": "bench-bot", "agentVersion": 1, "principalId": "cust@x"}
    (await client.post("/api/v1/runs", json=admission)).raise_for_status()
    call = {
        "toolCallId": "call_1",
        "toolName": "send_email",
        "arguments": {"to": "bob@example.com"},
        "reason": "bench",
        "rejectionMessage": "no",
    }
    events = {"events": [{"seq": 1, "type": "approval.requested", "step": 1, "calls": [call]}]}
    (await client.post(f"/api/v1/runs/{run_id}/events", json=events)).raise_for_status()
    state = (await client.get(f"/api/v1/runs/{run_id}")).json()
    return state["pendingCalls"][0]["id"]


async def trial(poller, decider, ingest: httpx.AsyncClient, i: int) -> tuple[float, float]:
    run_id = f"dec_{secrets.token_hex(6)}_{i}"
    approval_id = await hold_one_call(ingest, run_id)
    poll = asyncio.ensure_future(
        poller.get(f"/api/v1/runs/{run_id}/decisions", params={"wait": 10})
    )
    polled_at = {}
    poll.add_done_callback(lambda _: polled_at.setdefault("t", time.perf_counter()))
    await asyncio.sleep(0.05)  # the poll is held and subscribed
    if poll.done():
        raise RuntimeError(f"the poll answered before any decision: {poll.result().text}")
    sent = time.perf_counter()
    response = await decider.post(
        f"/api/v1/approvals/{approval_id}/decision", json={"decision": "deny", "message": "no"}
    )
    returned = time.perf_counter()
    response.raise_for_status()
    body = (await asyncio.wait_for(poll, 15)).json()
    if not body["decisions"] or body["decisions"][0]["approvalId"] != approval_id:
        raise RuntimeError(f"unexpected answer: {body}")
    return (polled_at["t"] - returned) * 1000, (polled_at["t"] - sent) * 1000


async def console_trials(bases: list[str], ingest_key: str, decide_key: str, n: int):
    def client(base, key):
        return httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    async with (
        client(bases[0], ingest_key) as poller,
        client(bases[-1], decide_key) as decider,
        client(bases[-1], ingest_key) as ingest,
    ):
        for i in range(5):  # warm-up: connections, URLconf, subscriptions
            await trial(poller, decider, ingest, -1 - i)
        return [await trial(poller, decider, ingest, i) for i in range(n)]


def notify_trials(dsn: str, n: int) -> list[float]:
    """NOTIFY returning → LISTEN side receiving, in ms."""
    channel = f"gavel_bench_{secrets.token_hex(4)}"
    received: list[float] = []
    ready = threading.Event()

    def listen():
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"LISTEN {channel}")
            ready.set()
            for _ in conn.notifies(stop_after=n + 5):
                received.append(time.perf_counter())

    listener = threading.Thread(target=listen)
    listener.start()
    ready.wait(10)
    sent: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(n + 5):
            done = len(received)
            conn.execute(f"NOTIFY {channel}, '{i}'")
            sent.append(time.perf_counter())
            while len(received) == done:
                time.sleep(0.0002)
    listener.join(10)
    return [(r - s) * 1000 for s, r in zip(sent[5:], received[5:], strict=True)]


def summary(name: str, values: list[float]) -> tuple[float, float]:
    p50, p99 = percentile(values, 50), percentile(values, 99)
    print(
        f"  {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, mean {statistics.fmean(values):.2f} ms, "
        f"max {max(values):.2f} ms (n={len(values)})"
    )
    return p50, p99


def main() -> None:
    dsn = _support.database_url()
    trials = _support.size("BENCH_TRIALS", 200, 20)
    redis = bool(os.environ.get("REDIS_URL"))
    servers = 2 if redis else 1
    _support.migrate()
    ingest_key, decide_key = provision()
    layer = (
        "Redis pub/sub layer, poll and decision on different daphnes"
        if redis
        else ("in-memory layer (REDIS_URL unset), one daphne")
    )
    print(f"decisions: {trials} trials, {layer}")
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(_support.daphne()) for _ in range(servers)]
        results = asyncio.run(console_trials(bases, ingest_key, decide_key, trials))
    after_return = [r for r, _ in results]
    after_send = [s for _, s in results]
    baseline = notify_trials(dsn, trials)
    p50, p99 = summary("decision POST returned -> long-poll returned", after_return)
    s50, s99 = summary("decision POST sent -> long-poll returned", after_send)
    b50, b99 = summary("baseline PostgreSQL NOTIFY -> LISTEN wake-up", baseline)
    print(
        f"decisions wake p50 {p50:.2f} ms / p99 {p99:.2f} ms (target <= {TARGET_P50_MS:.0f} / "
        f"<= {TARGET_P99_MS:.0f} ms); baseline NOTIFY p50 {b50:.2f} ms / p99 {b99:.2f} ms"
    )
    where = "2 daphnes + Redis" if redis else "1 daphne, in-memory layer"
    _support.record(
        "decisions",
        f"decision POST sent → runtime's long-poll returned p50 / p99 ({where})",
        f"{s50:.1f} / {s99:.1f} ms",
        baseline=f"PostgreSQL NOTIFY → LISTEN {b50:.2f} / {b99:.2f} ms",
        target="p50 ≤ 15, p99 ≤ 50 ms",
        met=s50 <= 15 and s99 <= 50,
    )
    _support.record(
        "decisions",
        f"decision POST returned → long-poll returned p50 / p99 ({where})",
        f"{p50:.1f} / {p99:.1f} ms",
        baseline=f"PostgreSQL NOTIFY → LISTEN {b50:.2f} / {b99:.2f} ms",
        target=f"p50 ≤ {TARGET_P50_MS:.0f}, p99 ≤ {TARGET_P99_MS:.0f} ms",
        met=p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS,
    )
    print(json.dumps({"p50_ms": p50, "p99_ms": p99, "notify_p50_ms": b50, "notify_p99_ms": b99}))
