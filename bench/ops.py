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
   key), in ONE daphne serving bench/_middleware_asgi.py: the console's Django handler and,
   beside it in the same process, the same handler built without the middleware (a request
   with `X-Bench-Middleware: off` goes there). Same process, same connection pool, same warm
   caches, the same keep-alive connection. Latency: requests alternate one by one (ABBA, so
   the machine's load drifting hits both sides alike); the figure is 1 + the median of the
   adjacent pairs' differences (with − without) over the median without (a paired estimate:
   on a loaded machine each request's own noise is large, and the difference of two medians
   moves by a few % between identical sides); the two medians are printed beside it.
   CPU: rounds of BENCH_OPS_ROUND requests alternate ABBA-wise, each round's CPU read to the
   nanosecond by the server itself (bench/_middleware_asgi.py: the whole process's, threads
   that ended included, as Django runs each request's sync parts on a thread of its own); the
   figure is the median over adjacent rounds of their ratio, with the quartiles printed as
   the noise beside it. Target ≤ 3 % more, for both.

Knobs (env): BENCH_OPS_REQUESTS (2000; quick 100), BENCH_OPS_RUNS (10000; quick 500),
BENCH_OPS_MW_REQUESTS (requests a side for 3., each phase: 5000; quick 1000), BENCH_OPS_ROUND (20).
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
        env = _support.server_env(GAVEL_METRICS_TOKEN=token)
        base = stack.enter_context(_support.daphne(env, app="bench._middleware_asgi:application"))
        client = stack.enter_context(httpx.Client(base_url=base, timeout=30))
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

        # 3. the middleware's cost, in one process
        _middleware_cost(client, auth)


def _cpu_ns(client: httpx.Client) -> int:
    return int(client.get("/__bench__/cpu").text)


def _spread(ratios: list[float]) -> str:
    ordered = sorted(ratios)
    q1, q3 = ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]
    return f"median {_p50(ordered):.3f}, quartiles {q1:.3f}-{q3:.3f}"


def _middleware_cost(client: httpx.Client, auth: dict) -> None:
    per_side = _support.size("BENCH_OPS_MW_REQUESTS", 5000, 1000)
    per_round = _support.size("BENCH_OPS_ROUND", 20, 20)
    path = "/api/v1/runs/run_ops"
    sides = {"with": auth, "without": {**auth, "X-Bench-Middleware": "off"}}
    for _ in range(100):  # warm both handlers
        for headers in sides.values():
            _timed(client, path, headers)
    latency: dict[str, list[float]] = {"with": [], "without": []}
    for i in range(per_side):
        for side in ("with", "without") if i % 2 == 0 else ("without", "with"):
            latency[side].append(_timed(client, path, sides[side]))
    w50, o50 = _p50(latency["with"]), _p50(latency["without"])
    differences = [w - o for w, o in zip(latency["with"], latency["without"], strict=True)]
    ratio = 1 + _p50(differences) / o50
    cpu: dict[str, list[int]] = {"with": [], "without": []}  # ns, per round
    rounds = max(2, per_side // per_round)
    for r in range(rounds):
        for side in ("with", "without") if r % 2 == 0 else ("without", "with"):
            before = _cpu_ns(client)
            for _ in range(per_round):
                _timed(client, path, sides[side])
            cpu[side].append(_cpu_ns(client) - before)
    cpu_ratios = [w / o for w, o in zip(cpu["with"], cpu["without"], strict=True) if o > 0]
    cpu_ratio = _p50(cpu_ratios)
    n = rounds * per_round
    print(
        f"  middleware: {per_side} requests a side alternated one by one (latency), then "
        f"{rounds} rounds of {per_round} a side (CPU): server CPU a request "
        f"{sum(cpu['with']) / n / 1e6:.3f} ms with, {sum(cpu['without']) / n / 1e6:.3f} ms "
        f"without; adjacent rounds' CPU ratio {_spread(cpu_ratios)}; latency medians "
        f"{w50:.2f} ms with, {o50:.2f} ms without (ratio {w50 / o50:.3f}), paired difference "
        f"{_p50(differences) * 1000:+.0f} µs"
    )
    _support.record(
        "ops", "authenticated GET p50 with the request middleware (metrics, request id)",
        f"{w50:.2f} ms (paired ×{ratio:.3f}; server CPU ×{cpu_ratio:.3f})",
        baseline=f"without {o50:.2f} ms, same process", ratio=ratio,
        target="≤ 1.03 (latency and CPU)", met=max(ratio, cpu_ratio) <= MIDDLEWARE_TARGET,
    )  # fmt: skip


if __name__ == "__main__":
    main()
