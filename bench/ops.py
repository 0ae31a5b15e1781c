"""Operations endpoints and the request middleware, against real daphnes on PostgreSQL.

1. `/readyz` p50 beside `/healthz` p50, alternated request by request on one kept-alive
   connection in the same run (target: readyz ≤ 5 ms). `/readyz` reads the database (the
   migrations table, the worker heartbeat) and pings Redis when configured; `/healthz` touches
   nothing: its figure is the HTTP floor.
2. `/metrics` (with the bearer token) p50 with a tenant of 10,000 runs seeded in bulk
   (bench/_volume.py: ~20 events a run, pending calls among them), baseline `/healthz` in the
   same run (target ≤ 20 ms).
3. The cost of ops.middleware.RequestMiddleware (request id, Prometheus count and histogram,
   span when tracing is on) on an authenticated GET (`GET /api/v1/runs/{id}` with an ingest
   key): two daphnes, one with it and one without (GAVEL_REQUEST_MIDDLEWARE=0), requests
   alternated between them round by round; the figure is the median latency with it over
   the median without, and the servers' CPU per request beside it (target ≤ 3 % more, for
   both).

Knobs (env): BENCH_OPS_REQUESTS (2000; quick 100), BENCH_OPS_RUNS (10000; quick 500).
"""

from __future__ import annotations

import contextlib
import secrets
import time

import httpx
import psycopg

from bench import _support

READYZ_TARGET_MS = 5.0
METRICS_TARGET_MS = 20.0
MIDDLEWARE_TARGET = 1.03


def _beat(dsn: str) -> None:
    """A fresh worker heartbeat (no worker runs in the benchmark): /readyz answers 200."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ops_workerheartbeat (worker, started_at, last_pass_at) "
            "VALUES ('bench', now(), now()) "
            "ON CONFLICT (worker) DO UPDATE SET last_pass_at = now()"
        )


def _seed(runs: int) -> str:
    slug = f"bench-ops-{runs}"
    code = (  # seeded once: the tenant, when it exists, is complete (one transaction)
        f"from bench import _volume\n"
        f"if not _volume.tenant_runs({slug!r}): _volume.seed({slug!r}, {runs})"
    )
    _support.manage("shell", "-c", code)
    return slug


def _timed(client: httpx.Client, path: str, headers=None) -> float:
    started = time.perf_counter()
    response = client.get(path, headers=headers)
    took = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{path} answered {response.status_code}: {response.text[:300]}")
    return took


def _p50(values: list[float]) -> float:
    return _support.median(values)


def main() -> None:
    dsn = _support.database_url()
    requests = _support.size("BENCH_OPS_REQUESTS", 2000, 100)
    runs = _support.size("BENCH_OPS_RUNS", 10_000, 500)
    _support.migrate()
    token = secrets.token_urlsafe(24)
    slug = _seed(runs)
    print(f"ops: {requests} requests a figure; /metrics with a tenant of {runs} runs ({slug})")
    _, key = _support.provision()

    with contextlib.ExitStack() as stack:
        on = stack.enter_context(_support.daphne(_support.server_env(GAVEL_METRICS_TOKEN=token)))
        off = stack.enter_context(
            _support.daphne(_support.server_env(GAVEL_REQUEST_MIDDLEWARE="0"))
        )
        client = stack.enter_context(httpx.Client(base_url=on, timeout=30))
        other = stack.enter_context(httpx.Client(base_url=off, timeout=30))
        auth = {"Authorization": f"Bearer {key}"}
        run = {"id": "run_ops", "agentId": "bench", "agentVersion": 1, "principalId": "p@x"}
        client.post("/api/v1/runs", json=run, headers=auth)  # 201, or 200 on a rerun

        # 1. /readyz beside /healthz
        _beat(dsn)
        for _ in range(20):  # warm both paths
            _timed(client, "/readyz")
            _timed(client, "/healthz")
        ready, health = [], []
        for i in range(requests):
            if i % 500 == 0:
                _beat(dsn)
            ready.append(_timed(client, "/readyz"))
            health.append(_timed(client, "/healthz"))
        r50, h50 = _p50(ready), _p50(health)
        _support.record(
            "ops", "GET /readyz p50", f"{r50:.2f} ms", baseline=f"/healthz {h50:.2f} ms",
            ratio=r50 / h50, target=f"≤ {READYZ_TARGET_MS:.0f} ms", met=r50 <= READYZ_TARGET_MS,
        )  # fmt: skip

        # 2. /metrics with the seeded runs
        bearer = {"Authorization": f"Bearer {token}"}
        for _ in range(10):
            _timed(client, "/metrics", bearer)
        scrapes, floor = [], []
        for _ in range(max(50, requests // 10)):
            scrapes.append(_timed(client, "/metrics", bearer))
            floor.append(_timed(client, "/healthz"))
        m50, f50 = _p50(scrapes), _p50(floor)
        _support.record(
            "ops", f"GET /metrics p50 ({runs:,} runs)", f"{m50:.2f} ms",
            baseline=f"/healthz {f50:.2f} ms", ratio=m50 / f50,
            target=f"≤ {METRICS_TARGET_MS:.0f} ms", met=m50 <= METRICS_TARGET_MS,
        )  # fmt: skip

        # 3. the middleware's cost: alternate rounds between the two servers
        path = "/api/v1/runs/run_ops"
        other.post("/api/v1/runs", json=run, headers=auth)
        for _ in range(50):
            _timed(client, path, auth)
            _timed(other, path, auth)
        with_mw, without = [], []
        cpu = {on: 0.0, off: 0.0}
        rounds, per_round = 20, max(5, requests // 20)
        for r in range(rounds):
            order = ((client, on, with_mw), (other, off, without))
            for c, base, out in order if r % 2 == 0 else reversed(order):
                pid = _support.PROCS[base].pid
                before = _support.cpu_seconds(pid)
                out.extend(_timed(c, path, auth) for _ in range(per_round))
                cpu[base] += _support.cpu_seconds(pid) - before
        w50, o50 = _p50(with_mw), _p50(without)
        ratio = w50 / o50
        cpu_ratio = cpu[on] / cpu[off] if cpu[off] else float("nan")
        _support.record(
            "ops", "authenticated GET p50 with the request middleware (metrics, request id)",
            f"{w50:.2f} ms (server CPU ×{cpu_ratio:.3f})", baseline=f"without {o50:.2f} ms",
            ratio=ratio, target="≤ 1.03 (latency and CPU)",
            met=max(ratio, cpu_ratio) <= MIDDLEWARE_TARGET,
        )  # fmt: skip


if __name__ == "__main__":
    main()
