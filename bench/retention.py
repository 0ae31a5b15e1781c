"""Retention pruning at scale (issue 27): does `manage.py prune` slow concurrent ingest, and
does the event log need time partitioning?

Set-up: tenant OLD holds BENCH_RETENTION_EVENTS (1,000,000; quick: 200,000) events in runs of
500 that finished 400 days ago (cloned in SQL from a run the console ingested, so every row
is the console's own shape), with `runDays` 30. Tenant NEW is ingested live through a real
daphne: BENCH_RETENTION_CLIENTS clients posting 500-event batches to fresh runs.

Rounds alternate ABBA-wise (ingest alone, ingest while `manage.py prune` deletes OLD's runs
in its small paced steps) for BENCH_RETENTION_SECONDS each, BENCH_RETENTION_ROUNDS pairs (5;
quick: 8 pairs of 5 s over 200,000 events), so both sides see the same machine; one
`manage.py prune` serves the whole run, stopped (SIGSTOP) during the rounds alone. The figure:
the median over adjacent pairs of ingest batches/s while pruning over batches/s alone (same
run), target >= 0.90.

Partitioning: each prune step deletes by index (a run's events by `(run, seq)`), so its cost
should not grow with the table. Measured: the median time of one 500-event delete step
on the full table against the same on the nearly empty table at the end, and how fast
pruning removes events against how fast ingest adds them. A step cost that stays flat and a
prune rate well above the ingest rate mean deletes keep up without partitions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg

from bench import _support
from bench.ingest import BATCH, admit, run_batches

TARGET = 0.90
TEMPLATE = "tmpl_run"


def _template(key: str, base: str) -> None:
    """The run OLD's history is cloned from, ingested through the API and finished."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
        admit(client, TEMPLATE)
        batch = run_batches(1)[0]
        client.post(f"/api/v1/runs/{TEMPLATE}/events", json={"events": batch}).raise_for_status()
        done = {"seq": BATCH + 1, "type": "run.finished", "status": "done", "result": {}}
        client.post(f"/api/v1/runs/{TEMPLATE}/events", json={"events": [done]}).raise_for_status()


def _seed(url: str, slug: str, events: int, prefix: str) -> int:
    """OLD's history: the template cloned in SQL into runs of 500 events (ids `prefix_N`),
    all 400 days old and finished. Returns the number of runs."""
    runs = max(1, events // BATCH)
    with psycopg.connect(url, autocommit=True) as conn:
        cols = [
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs_run' "
                "AND column_name NOT IN ('id', 'external_id', 'started_at', 'updated_at', "
                "'finished_at') ORDER BY ordinal_position"
            )
        ]
        listed = ", ".join(cols)
        tenant_id, template_id = conn.execute(
            "SELECT r.tenant_id, r.id FROM runs_run r JOIN console_tenant t ON t.id = r.tenant_id "
            "WHERE t.slug = %s AND r.external_id = %s",
            [slug, TEMPLATE],
        ).fetchone()
        conn.execute(
            f"INSERT INTO runs_run ({listed}, external_id, started_at, updated_at, finished_at) "  # noqa: S608
            f"SELECT {listed}, %s || g, now() - interval '400 days', "
            "now() - interval '400 days', now() - interval '400 days' "
            "FROM runs_run, generate_series(1, %s) g WHERE id = %s",
            [prefix + "_", runs, template_id],
        )
        conn.execute(
            "INSERT INTO runs_runevent (run_id, seq, type, data, at) "
            "SELECT r.id, e.seq, e.type, e.data, now() - interval '400 days' "
            "FROM runs_run r JOIN runs_runevent e ON e.run_id = %s "
            "WHERE r.tenant_id = %s AND r.external_id LIKE %s",
            [template_id, tenant_id, prefix + "\\_%"],
        )
        conn.execute(
            "INSERT INTO retention_retentionpolicy (tenant_id, run_days, sent_mail_days, "
            "webhook_delivery_days, read_notification_days) VALUES (%s, 30, 30, 30, 90) "
            "ON CONFLICT (tenant_id) DO UPDATE SET run_days = 30",
            [tenant_id],
        )
        conn.execute("ANALYZE runs_run; ANALYZE runs_runevent")
    return runs


def _old_events(url: str, slug: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT count(*) FROM runs_runevent e JOIN runs_run r ON r.id = e.run_id "
            "JOIN console_tenant t ON t.id = r.tenant_id WHERE t.slug = %s",
            [slug],
        ).fetchone()[0]


class Ingest:
    """Clients posting 500-event batches to fresh runs of tenant NEW; counts batches."""

    def __init__(self, base: str, key: str, clients: int):
        self.base, self.key, self.clients = base, key, clients
        self.batches = run_batches(4)
        self.count = 0
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.n = 0

    def _one(self, stop: float, client: httpx.Client, who: int) -> None:
        while time.monotonic() < stop:
            with self.lock:
                self.n += 1
                run_id = f"new_{who}_{self.n}"
            admit(client, run_id)
            for batch in self.batches:
                if time.monotonic() >= stop:
                    return
                response = client.post(f"/api/v1/runs/{run_id}/events", json={"events": batch})
                if response.status_code != 200:
                    self.errors.append(f"{response.status_code} {response.text[:200]}")
                    continue
                with self.lock:
                    self.count += 1

    def rate(self, seconds: float) -> float:
        """Batches per second for `seconds`, all clients together."""
        headers = {"Authorization": f"Bearer {self.key}"}
        clients = [
            httpx.Client(base_url=self.base, headers=headers, timeout=120)
            for _ in range(self.clients)
        ]
        try:
            before = self.count
            started = time.monotonic()
            stop = started + seconds
            with ThreadPoolExecutor(self.clients) as pool:
                list(pool.map(lambda i: self._one(stop, clients[i], i), range(self.clients)))
            return (self.count - before) / (time.monotonic() - started)
        finally:
            for c in clients:
                c.close()


def _step_times(url: str, slug: str, steps: int) -> list[float]:
    """The time of single 500-row delete steps of OLD's events, as the pruner issues them
    (one run's oldest rows by primary key), in ms, on warm caches (each run's step is done
    twice, the second timed); rolled back, so nothing changes."""
    times = []
    with psycopg.connect(url) as conn:
        runs = [
            r[0]
            for r in conn.execute(
                "SELECT r.id FROM runs_run r JOIN console_tenant t ON t.id = r.tenant_id "
                "WHERE t.slug = %s AND r.external_id <> %s ORDER BY random() LIMIT %s",
                [slug, TEMPLATE, steps],
            )
        ]
        for run in runs:
            for timed in (False, True):
                started = time.perf_counter()
                conn.execute(
                    "DELETE FROM runs_runevent WHERE id IN (SELECT id FROM runs_runevent "
                    "WHERE run_id = %s ORDER BY id LIMIT 500)",
                    [run],
                )
                if timed:
                    times.append((time.perf_counter() - started) * 1000)
                conn.rollback()
    return times


def _pruner(env: dict, url: str, slug: str) -> subprocess.Popen:
    """`manage.py prune` in small steps, returned once it has removed something (its Django
    start-up is not part of the measured rounds)."""
    before = _old_events(url, slug)
    pruner = subprocess.Popen(  # noqa: S603 - our own manage.py
        [_support.PYTHON, "manage.py", "prune", "--batch", "500"],
        cwd=_support.ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while _old_events(url, slug) == before and pruner.poll() is None:
        if time.monotonic() > deadline:
            pruner.kill()
            raise RuntimeError("the pruner removed nothing in 120 s")
        time.sleep(0.2)
    return pruner


def main() -> None:
    url = _support.database_url()
    events = _support.size("BENCH_RETENTION_EVENTS", 1_000_000, 200_000)
    seconds = _support.size("BENCH_RETENTION_SECONDS", 20.0, 5.0)
    rounds = _support.size("BENCH_RETENTION_ROUNDS", 5, 8)
    clients = _support.size("BENCH_RETENTION_CLIENTS", 2, 2)
    small = max(BATCH * 4, events // 50)
    _support.migrate()
    old_slug, old_key = _support.provision(scopes="ingest")
    _, new_key = _support.provision(scopes="ingest")
    print(
        f"retention: {events:,} old events to prune, {rounds} round(s) of {seconds:.0f} s each "
        f"side, {clients} ingest clients, one daphne; load average before: "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    env = _support.server_env()
    with _support.daphne(env) as base:
        started = time.monotonic()
        _template(old_key, base)
        _seed(url, old_slug, small, "small")
        small_seeded = _old_events(url, old_slug)
        small_steps = _step_times(url, old_slug, 30)
        _seed(url, old_slug, events - small, "old")
        seeded = _old_events(url, old_slug)
        full_steps = _step_times(url, old_slug, 30)
        print(f"  seeded {seeded:,} old events in {time.monotonic() - started:.1f} s")
        ingest = Ingest(base, new_key, clients)
        ingest.rate(min(3.0, seconds))  # warm-up
        alone, pruning = [], []
        prune_removed, prune_seconds = 0, 0.0
        # One pruner for the whole run, stopped (SIGSTOP) during the rounds alone and let go
        # (SIGCONT) during the rounds beside it: no Django start-up between rounds.
        pruner = _pruner(env, url, old_slug)
        pruner.send_signal(signal.SIGSTOP)
        try:
            for r in range(rounds):
                # ABBA: alone, pruning, pruning, alone, ... so neither side always goes first
                for side in ("alone", "pruning") if r % 2 == 0 else ("pruning", "alone"):
                    if side == "alone":
                        alone.append(ingest.rate(seconds))
                        continue
                    before, clock = _old_events(url, old_slug), time.monotonic()
                    pruner.send_signal(signal.SIGCONT)
                    pruning.append(ingest.rate(seconds))
                    pruner.send_signal(signal.SIGSTOP)
                    prune_removed += before - _old_events(url, old_slug)
                    prune_seconds += time.monotonic() - clock
                    if pruner.poll() is not None:
                        print("  (the pruner finished during a round: the rest ran without it)")
        finally:
            pruner.send_signal(signal.SIGCONT)
            pruner.terminate()
            pruner.wait(30)
        left = _old_events(url, old_slug)
    if ingest.errors:
        raise RuntimeError(f"ingest failed {len(ingest.errors)} times: {ingest.errors[:3]}")
    base_rate, with_rate = _support.median(alone), _support.median(pruning)
    # the figure: the median over adjacent rounds (same machine load) of their ratio
    ratios = [p / a for p, a in zip(pruning, alone, strict=True)]
    ratio = _support.median(ratios)
    print(f"  ingest batches/s alone: {', '.join(f'{r:.2f}' for r in alone)}")
    print(f"  ingest batches/s while pruning: {', '.join(f'{r:.2f}' for r in pruning)}")
    listed = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"  adjacent rounds' ratios: {listed} (median {ratio:.3f})")
    prune_rate = prune_removed / prune_seconds if prune_seconds else 0.0
    ingest_rate = with_rate * BATCH
    print(
        f"  pruned {prune_removed:,} events in {prune_seconds:.0f} s ({prune_rate:,.0f} events/s) "
        f"while ingest added {ingest_rate:,.0f} events/s; {left:,} old events left"
    )
    full, few = _support.median(full_steps), _support.median(small_steps)
    print(
        f"  one 500-event delete step (median of {len(full_steps)}): {full:.1f} ms among "
        f"{seeded:,} old events, {few:.1f} ms among {small_seeded:,}"
    )
    _support.record(
        "retention",
        f"ingest while pruning {seeded:,} old events ({clients} clients, 500-event batches)",
        f"{with_rate:.2f} batches/s",
        baseline=f"ingest alone {base_rate:.2f} batches/s (medians of rounds; ratio: the "
        "median of adjacent pairs' ratios)",
        ratio=ratio,
        target=f"ratio ≥ {TARGET}",
        met=ratio >= TARGET,
    )
    _support.record(
        "retention",
        "prune rate against ingest rate (events/s, same rounds)",
        f"{prune_rate:,.0f} events/s pruned",
        baseline=f"{ingest_rate:,.0f} events/s ingested",
        ratio=prune_rate / ingest_rate if ingest_rate else None,
    )
    _support.record(
        "retention",
        f"one 500-event delete step among {seeded:,} old events (partitioning needed?)",
        f"{full:.1f} ms",
        baseline=f"{few:.1f} ms among {small_seeded:,}",
        ratio=full / few if few else None,
    )
    print(f"  load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
