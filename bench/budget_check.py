"""The budget check a runtime calls before each step: `POST /api/v1/budgets/check` through a
real daphne on PostgreSQL, against a bare authenticated GET measured in the same run.

Set-up (not timed): a tenant with BENCH_CHECK_STEPS (default 100,000) steps of usage over 90
days (`manage.py seed_usage`), a run of agent `bench-bot` for a principal in team `support`
with its own cost limit, and four budgets that all apply to it (agent, principal, team,
tenant: the check reads every one, narrowest first, from the rollups in one query).

Each round sends one check and one `GET /api/v1/runs/{runId}` (the baseline: the same key
check, one lookup of the same run, a small JSON answer), alternating which goes first, one
request at a time on a kept-alive connection. Figures: each one's p50 and p99 over
BENCH_CHECK_ROUNDS (default 500) rounds and the ratio of the p50s. Target: the check's p50
<= 5 ms.

The same rounds also time the stack's floor: `GET /api/v1/_floor`, a path no route serves
(no key check, no database: daphne, the middleware, the URL resolver and the JSON 404
envelope). What a request costs before it does anything is the part of both figures no
handler can remove.
"""

from __future__ import annotations

import time

import httpx

from bench import _support

TARGET_P50_MS = 5.0
AGENT, PRINCIPAL, TEAM = "bench-bot", "check@bench", "support"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def provision(steps: int) -> tuple[str, str]:
    budgets = (
        ("agent", f"agent:{AGENT}", "day"),
        ("principal", f"principal:{PRINCIPAL}", "week"),
        ("team", f"team:{TEAM}", "month"),
        ("tenant", "tenant", "month"),
    )
    return _support.provision(
        scopes="ingest",
        then=(
            ("seed_usage", "--tenant", "{slug}", "--steps", str(steps), "--days", "90"),
            ("create_principal", "--tenant", "{slug}", PRINCIPAL, "--team", TEAM),
            *(
                ("create_budget", "--tenant", "{slug}", "--name", f"bench {name}",
                 "--scope", scope, "--period", period, "--ceiling", "100000000")
                for name, scope, period in budgets
            ),
        ),
    )  # fmt: skip


def timed(client: httpx.Client, method: str, url: str, **kwargs) -> float:
    started = time.perf_counter()
    response = client.request(method, url, **kwargs)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return elapsed


def main() -> None:
    _support.database_url()
    steps = _support.size("BENCH_CHECK_STEPS", 100_000, 2_000)
    rounds = _support.size("BENCH_CHECK_ROUNDS", 500, 40)
    _support.migrate()
    _slug, key = provision(steps)
    run_id = "run_bench_check"
    admission = {
        "id": run_id,
        "agentId": AGENT,
        "agentVersion": 1,
        "principalId": PRINCIPAL,
        "limits": {"costCeilingMinorUnits": 100000000},
    }
    check = {"runId": run_id, "estimatedCostMinorUnits": 120, "estimatedTokens": 2000}
    with _support.daphne() as base:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=10) as client:
            client.post("/api/v1/runs", json=admission).raise_for_status()
            answer = client.post("/api/v1/budgets/check", json=check).json()
            if not answer["allowed"] or len(answer["budgets"]) != 5:
                raise SystemExit(f"unexpected check answer: {answer}")
            checks, gets, floors = [], [], []
            warm = min(50, rounds)
            for i in range(rounds + warm):  # the first rounds warm both paths up
                pair = [
                    (checks, "POST", "/api/v1/budgets/check", {"json": check}),
                    (gets, "GET", f"/api/v1/runs/{run_id}", {}),
                ]
                for into, method, url, kwargs in pair if i % 2 else reversed(pair):
                    elapsed = timed(client, method, url, **kwargs)
                    if i >= warm:
                        into.append(elapsed)
                started = time.perf_counter()
                floor = client.get("/api/v1/_floor")
                if floor.status_code != 404:
                    raise SystemExit(f"the floor path answered {floor.status_code}")
                if i >= warm:
                    floors.append((time.perf_counter() - started) * 1000)
    check_p50, get_p50 = percentile(checks, 50), percentile(gets, 50)
    print(
        f"budget check, {len(answer['budgets'])} budgets, {steps:,} steps of usage, {rounds} rounds"
    )
    print(
        f"  POST /budgets/check     p50 {check_p50:6.2f} ms  p99 {percentile(checks, 99):6.2f} ms"
    )
    print(f"  baseline GET /runs/{{id}} p50 {get_p50:6.2f} ms  p99 {percentile(gets, 99):6.2f} ms")
    floor_p50 = percentile(floors, 50)
    print(
        f"  floor GET (404)         p50 {floor_p50:6.2f} ms  p99 {percentile(floors, 99):6.2f} ms"
    )
    print(
        f"  above the floor: check {check_p50 - floor_p50:.2f} ms, GET {get_p50 - floor_p50:.2f} ms"
    )
    verdict = "met" if check_p50 <= TARGET_P50_MS else "MISSED"
    _support.record(
        "budget_check",
        f"POST /budgets/check p50 / p99 ({len(answer['budgets'])} entries, {steps:,} steps)",
        f"{check_p50:.2f} / {percentile(checks, 99):.2f} ms",
        baseline=f"GET /runs/{{id}} {get_p50:.2f} / {percentile(gets, 99):.2f} ms; "
        f"floor (404) {floor_p50:.2f} ms",
        ratio=check_p50 / get_p50,
        target="p50 ≤ 5 ms",
        met=check_p50 <= TARGET_P50_MS,
    )
    print(
        f"  ratio check / GET (p50) {check_p50 / get_p50:.2f}; "
        f"target p50 <= {TARGET_P50_MS:.0f} ms: {verdict}"
    )


if __name__ == "__main__":
    main()
