"""History must not slow ingest: one long run fed batch after batch through a real daphne,
each batch POST timed; a late batch should cost what an early one does.

Every step carries what a runtime reports per the contract (bench/ingest.py's `step_events`):
a verdict on its turn and a trace id on `step.finished`, so a long run holds thousands of
each. Whatever the console keeps per run and rewrites per batch (a growing list in the run's
row) shows up as late batches costing more than early ones.

Figure: median time of the last batches (55-60 of 60) over the median of the first ones (1-5)
of the same run; for scale, the 10th batch and a fresh run's first batches, posted after the
long run on the same server (same-run baseline: the server and database as warm as they get).

Each batch's time is the median over BENCH_HISTORY_ROUNDS long runs (the machine is shared:
one slow POST must not decide the figure).

Knobs (env): BENCH_HISTORY_BATCHES (60; quick 12), BENCH_HISTORY_SIZE (events per batch, 500;
quick 100), BENCH_HISTORY_ROUNDS (long runs, 3; quick 1).
"""

from __future__ import annotations

import json
import os
import secrets
import time

import httpx

from bench import _support
from bench.ingest import admit, step_events

TARGET = 1.2


def plan(batches: int, size: int) -> list[bytes]:
    """`batches` bodies of `size` events each, seqs 1..N without gaps."""
    events: list[dict] = []
    step = 0
    while len(events) < batches * size:
        step += 1
        events += step_events(step)
    events = events[: batches * size]
    for seq, event in enumerate(events, start=1):
        event["seq"] = seq
    return [
        json.dumps({"events": events[i : i + size]}).encode() for i in range(0, len(events), size)
    ]


def feed(client: httpx.Client, bodies: list[bytes]) -> list[float]:
    """A fresh run fed these bodies in order; the milliseconds of each batch POST."""
    run_id = f"h_{secrets.token_hex(6)}"
    admit(client, run_id)
    times = []
    for body in bodies:
        started = time.perf_counter()
        response = client.post(f"/api/v1/runs/{run_id}/events", content=body)
        times.append(1000 * (time.perf_counter() - started))
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {response.text[:500]}")
    return times


def main() -> None:
    _support.database_url()
    batches = _support.size("BENCH_HISTORY_BATCHES", 60, 12)
    size = _support.size("BENCH_HISTORY_SIZE", 500, 100)
    rounds = _support.size("BENCH_HISTORY_ROUNDS", 3, 1)
    edge = 5 if batches >= 20 else 3  # batches 1-5 against the last 6 (55-60 of 60)
    _support.migrate()
    _, key = _support.provision(scopes="ingest")
    print(
        f"history: {rounds} run(s) of {batches} batches x {size} events (a verdict and a trace "
        f"id per step), one client, one daphne; load average before: {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} CPUs"
    )
    bodies = plan(batches, size)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with (
        _support.daphne() as base,
        httpx.Client(base_url=base, headers=headers, timeout=120) as client,
    ):
        feed(client, bodies[:edge])  # warm-up: the process compiles, caches fill
        longs, fresh = [], []
        for _ in range(rounds):
            longs.append(feed(client, bodies))
            fresh += feed(client, bodies[:edge])
    long = [_support.median(list(times)) for times in zip(*longs, strict=True)]
    first = _support.median(long[:edge])
    last = _support.median(long[-(edge + 1) :])
    tenth = long[min(9, len(long) - 1)]
    ratio = last / first
    print(f"  per batch (ms, median of {rounds}): {', '.join(f'{t:.0f}' for t in long)}")
    print(
        f"  batches 1-{edge} (median) {first:.1f} ms, batch 10 {tenth:.1f} ms, batches "
        f"{batches - edge}-{batches} (median) {last:.1f} ms; a fresh run's batches 1-{edge} "
        f"(median) {_support.median(fresh):.1f} ms"
    )
    print(f"history ratio last/first batches: {ratio:.2f} (target <= {TARGET})")
    _support.record(
        "history",
        f"batches {batches - edge}-{batches} of one {batches}-batch run ({size} events each)",
        f"{last:.1f} ms per batch",
        baseline=(
            f"batches 1-{edge} of the same run {first:.1f} ms (10th {tenth:.1f} ms; a fresh "
            f"run's first {_support.median(fresh):.1f} ms)"
        ),
        ratio=ratio,
        target=f"ratio ≤ {TARGET}",
        met=ratio <= TARGET,
    )
    print(f"  load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
