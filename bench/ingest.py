"""Ingest throughput: 500-event batches through a real daphne, against raw psycopg
`executemany` of the same RunEvent rows into the same database, in the same run.

The console's figure is end to end (HTTP, auth, validation, the seq rules, the RunEvent rows
AND every effect: steps, messages, tool results, usage rollups). The baseline writes only the
RunEvent rows, one transaction per 500, with the same number of concurrent clients.

Both sides open their clients (HTTP connections, psycopg connections) before the clock. Each
round also prints where the CPU went per 500 events: the daphne processes, PostgreSQL, and the
benchmark's own clients (on a small machine they all share the same cores).

Knobs (env): BENCH_RUNS (runs per round, default 16), BENCH_BATCHES (batches per run, 4),
BENCH_CLIENTS (concurrent clients, 4), BENCH_ROUNDS (5), BENCH_SERVERS (daphne processes,
default one per CPU as a deployment runs them; the clients share them as a load balancer
would). The GIL keeps one process on one core, so processes are how one host scales.
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


def cpu_now() -> dict:
    """CPU seconds so far: this process (the clients), the daphne processes, PostgreSQL."""
    servers = sum(_support.cpu_seconds(p.pid) for p in _support.PROCS.values())
    return {"client": time.process_time(), "server": servers, "pg": _support.postgres_cpu_seconds()}


def timed(shares: list, open_client, feed) -> tuple[float, dict]:
    """(seconds, CPU seconds by party) for every share to be fed, each on its own thread with
    its own client; the clients are opened (and closed) outside the clock and the meters."""
    ready = threading.Barrier(len(shares) + 1)
    done = threading.Barrier(len(shares) + 1)

    def worker(share):
        with open_client() as client:
            ready.wait()
            try:
                feed(client, share)
            finally:
                done.wait()

    with ThreadPoolExecutor(len(shares)) as pool:
        futures = [pool.submit(worker, share) for share in shares]
        ready.wait()
        before, started = cpu_now(), time.perf_counter()
        done.wait()
        seconds, after = time.perf_counter() - started, cpu_now()
        for future in futures:
            future.result()
    used = {k: None if before[k] is None else after[k] - before[k] for k in before}
    return seconds, used


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

    seconds, cpu = timed([run_ids[i::clients] for i in range(clients)], open_client, feed)
    return runs * batches * BATCH / seconds, per_batch(cpu, runs * batches)


def baseline_round(
    base: str, key: str, dsn: str, *, runs: int, batches: int, clients: int, per_row=False
) -> tuple[float, dict]:
    """Rows per second of raw psycopg executemany of the same RunEvent rows (one transaction
    per 500). psycopg 3 pipelines executemany: the 500 INSERTs go out in one round trip.
    `per_row`: one `execute` (one round trip) per row instead, the naive client."""
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
                    if per_row:
                        for row in rows:
                            cur.execute(sql, row)
                    else:
                        cur.executemany(sql, rows)
                conn.commit()

    seconds, cpu = timed(
        [run_ids[i::clients] for i in range(clients)], lambda: psycopg.connect(dsn), feed
    )
    return runs * batches * BATCH / seconds, per_batch(cpu, runs * batches)


def per_batch(cpu: dict, batches: int) -> dict:
    """CPU milliseconds per 500 events (or rows), by party."""
    return {k: None if v is None else 1000 * v / batches for k, v in cpu.items()}


def _cpu_line(label: str, cpu: list[dict], parties: dict[str, str]) -> str:
    parts = []
    for key, name in parties.items():
        values = [c[key] for c in cpu if c[key] is not None]
        parts.append(f"{name} {_support.median(values):.1f} ms" if values else f"{name} n/a")
    return f"  CPU per 500 {label} (median): " + ", ".join(parts)


def main() -> None:
    dsn = _support.database_url()
    runs = int(os.environ.get("BENCH_RUNS", 16))
    batches = int(os.environ.get("BENCH_BATCHES", 4))
    clients = int(os.environ.get("BENCH_CLIENTS", 4))
    rounds = int(os.environ.get("BENCH_ROUNDS", 5))
    # One daphne process per core, as a deployment runs them (BENCH_SERVERS=1: one only).
    servers = int(os.environ.get("BENCH_SERVERS", os.cpu_count() or 1))
    _support.migrate()
    _, key = _support.provision(scopes="ingest")
    print(
        f"ingest: {rounds} rounds of {runs} runs x {batches} batches x {BATCH} events, "
        f"{clients} concurrent clients, {servers} daphne process(es); "
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    console, baseline, console_cpu, baseline_cpu, naive = [], [], [], [], []
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(_support.daphne()) for _ in range(servers)]
        base = bases[0]
        console_round(bases, key, runs=clients, batches=1, clients=clients)  # warm-up
        for i in range(rounds):
            rate, cpu = console_round(bases, key, runs=runs, batches=batches, clients=clients)
            console.append(rate)
            console_cpu.append(cpu)
            rate, cpu = baseline_round(base, key, dsn, runs=runs, batches=batches, clients=clients)
            baseline.append(rate)
            baseline_cpu.append(cpu)
            rate, _ = baseline_round(
                base, key, dsn, runs=runs, batches=batches, clients=clients, per_row=True
            )
            naive.append(rate)
            print(
                f"  round {i + 1}: console {console[-1]:,.0f} events/s, "
                f"psycopg executemany {baseline[-1]:,.0f} rows/s, "
                f"psycopg execute per row {naive[-1]:,.0f} rows/s"
            )
    c, b = _support.median(console), _support.median(baseline)
    print(f"ingest console (median): {c:,.0f} events/s")
    print(f"ingest baseline psycopg executemany (median): {b:,.0f} rows/s")
    print(f"ingest ratio console/baseline: {c / b:.2f} (target >= 1.0)")
    n = _support.median(naive)
    print(
        f"  for scale: psycopg execute per row (median) {n:,.0f} rows/s, console/that {c / n:.2f}"
    )
    print(
        _cpu_line(
            "events, console",
            console_cpu,
            {"server": "daphne", "pg": "PostgreSQL", "client": "clients"},
        )
    )
    print(
        _cpu_line("rows, baseline", baseline_cpu, {"pg": "PostgreSQL", "client": "psycopg client"})
    )
    print(f"  load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
