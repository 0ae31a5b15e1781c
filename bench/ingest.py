"""Ingest throughput: 500-event batches through a real daphne, against raw psycopg
`executemany` of the same RunEvent rows into the same database, in the same run.

The console's figure is end to end (HTTP, auth, validation, the seq rules, the RunEvent rows
AND every effect: steps, messages, tool results, usage rollups). The baseline writes only the
RunEvent rows, one transaction per 500, with the same number of concurrent clients.

Knobs (env): BENCH_RUNS (runs per round, default 8), BENCH_BATCHES (batches per run, 4),
BENCH_CLIENTS (concurrent clients, 4), BENCH_ROUNDS (5), BENCH_SERVERS (daphne processes, 1;
a sync view runs on one thread per process, so processes are how one host scales).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg

from bench import _support

BATCH = 500


def step_events(step: int) -> list[dict]:
    """One model step as a runtime reports it: 6 events."""
    call = f"call_{step}"
    return [
        {"type": "step.started", "step": step, "agentId": "bench-bot", "model": "model-a"},
        {
            "type": "message",
            "step": step,
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": f"Looking up order {step}."}],
                "toolCalls": [{"id": call, "name": "lookup_order", "arguments": {"id": step}}],
            },
        },
        {
            "type": "tool.result",
            "step": step,
            "toolCallId": call,
            "toolName": "lookup_order",
            "result": {"status": "shipped", "items": [1, 2, 3]},
            "isError": False,
        },
        {
            "type": "message",
            "step": step,
            "message": {"role": "tool", "content": '{"status": "shipped"}', "toolCallId": call},
        },
        {
            "type": "verdict",
            "turn": f"{step}:0",
            "verdict": "allowed",
            "guard": "pii",
            "reason": "no personal data",
        },
        {
            "type": "step.finished",
            "step": step,
            "model": "model-a",
            "finishReason": "tool_calls",
            "traceId": f"trace_{step}",
            "usage": {"inputTokens": 1200, "outputTokens": 80, "costMinorUnits": 3},
        },
    ]


def run_batches(batches: int) -> list[list[dict]]:
    """`batches` batches of exactly 500 events with seqs 1..N and no gaps."""
    events: list[dict] = []
    step = 0
    while len(events) < batches * BATCH:
        step += 1
        events += step_events(step)
    events = events[: batches * BATCH]
    for seq, event in enumerate(events, start=1):
        event["seq"] = seq
    return [events[i : i + BATCH] for i in range(0, len(events), BATCH)]


def admit(client: httpx.Client, run_id: str) -> None:
    body = {"id": run_id, "agentId": "bench-bot", "agentVersion": 1, "principalId": "bench@x"}
    response = client.post("/api/v1/runs", json=body)
    response.raise_for_status()


def timed(shares: list, open_client, feed) -> float:
    """Seconds for every share to be fed, each on its own thread with its own client; the
    clients are opened (and closed) outside the clock, so only the feeding is timed."""
    ready = threading.Barrier(len(shares) + 1)
    clock: dict[str, float] = {}

    def worker(share):
        with open_client() as client:
            ready.wait()
            feed(client, share)

    with ThreadPoolExecutor(len(shares)) as pool:
        futures = [pool.submit(worker, share) for share in shares]
        ready.wait()
        clock["start"] = time.perf_counter()
        for future in futures:
            future.result()
        return time.perf_counter() - clock["start"]


def console_round(bases: list[str], key: str, *, runs: int, batches: int, clients: int) -> float:
    """Events per second through HTTP (admission not timed); client i talks to server i % n."""
    bodies = [json.dumps({"events": batch}).encode() for batch in run_batches(batches)]
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    run_ids = [f"c_{secrets.token_hex(6)}" for _ in range(runs)]
    with httpx.Client(base_url=bases[0], headers=headers, timeout=120) as client:
        for run_id in run_ids:
            admit(client, run_id)
    servers = iter(range(clients))

    def open_client():
        base = bases[next(servers) % len(bases)]
        return httpx.Client(base_url=base, headers=headers, timeout=120)

    def feed(client, ids: list[str]) -> None:
        for run_id in ids:
            for body in bodies:
                response = client.post(f"/api/v1/runs/{run_id}/events", content=body)
                if response.status_code != 200:
                    raise RuntimeError(f"{response.status_code}: {response.text[:500]}")

    seconds = timed([run_ids[i::clients] for i in range(clients)], open_client, feed)
    return runs * batches * BATCH / seconds


def baseline_round(
    base: str, key: str, dsn: str, *, runs: int, batches: int, clients: int
) -> float:
    """Rows per second of raw psycopg executemany of the same RunEvent rows."""
    plan = run_batches(batches)
    run_ids = [f"b_{secrets.token_hex(6)}" for _ in range(runs)]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client:
        for run_id in run_ids:
            admit(client, run_id)
    with psycopg.connect(dsn) as conn:
        pks = dict(
            conn.execute(
                "SELECT external_id, id FROM runs_run WHERE external_id = ANY(%s)", [run_ids]
            ).fetchall()
        )
    sql = "INSERT INTO runs_runevent (run_id, seq, type, data, at) VALUES (%s, %s, %s, %s, now())"
    # The same rows the console stores, built before the clock starts (as the bodies are).
    rows_of = {
        run_id: [[(pks[run_id], e["seq"], e["type"], json.dumps(e)) for e in b] for b in plan]
        for run_id in run_ids
    }

    def feed(conn, ids: list[str]) -> None:
        for run_id in ids:
            for rows in rows_of[run_id]:
                with conn.cursor() as cur:
                    cur.executemany(sql, rows)
                conn.commit()

    seconds = timed(
        [run_ids[i::clients] for i in range(clients)], lambda: psycopg.connect(dsn), feed
    )
    return runs * batches * BATCH / seconds


def main() -> None:
    dsn = _support.database_url()
    runs = int(os.environ.get("BENCH_RUNS", 8))
    batches = int(os.environ.get("BENCH_BATCHES", 4))
    clients = int(os.environ.get("BENCH_CLIENTS", 4))
    rounds = int(os.environ.get("BENCH_ROUNDS", 5))
    servers = int(os.environ.get("BENCH_SERVERS", 1))
    _support.migrate()
    _, key = _support.provision(scopes="ingest")
    print(
        f"ingest: {rounds} rounds of {runs} runs x {batches} batches x {BATCH} events, "
        f"{clients} concurrent clients, {servers} daphne process(es); "
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    console, baseline = [], []
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(_support.daphne()) for _ in range(servers)]
        base = bases[0]
        console_round(bases, key, runs=clients, batches=1, clients=clients)  # warm-up
        for i in range(rounds):
            console.append(console_round(bases, key, runs=runs, batches=batches, clients=clients))
            baseline.append(
                baseline_round(base, key, dsn, runs=runs, batches=batches, clients=clients)
            )
            print(
                f"  round {i + 1}: console {console[-1]:,.0f} events/s, "
                f"psycopg executemany {baseline[-1]:,.0f} rows/s"
            )
    c, b = _support.median(console), _support.median(baseline)
    print(f"ingest console (median): {c:,.0f} events/s")
    print(f"ingest baseline psycopg executemany (median): {b:,.0f} rows/s")
    print(f"ingest ratio console/baseline: {c / b:.2f} (target >= 1.0)")
    print(f"  load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
