"""Ingest throughput: 500-event batches through a real daphne, against raw psycopg writing the
same rows the console stores into the same database, in the same run.

The console's figure is end to end (HTTP, auth, validation, the seq rules, the RunEvent rows
AND every effect: steps, messages, tool results, verdicts, traces, the usage rollup, the run's
totals). The baseline (issue 18: "raw psycopg writing the same rows the console stores, one
transaction per 500-event batch, same client concurrency") writes exactly those rows with
`executemany`: the log rows and, copied from a run the console ingested with the same batches,
every derived row, the rollup's upsert and the run's update, one transaction per batch. Also
printed, for scale: the log rows alone, and one `execute` per log row.

Both sides open their clients (HTTP connections, psycopg connections) before the clock. Each
round also prints where the CPU went per 500 events: the daphne processes, PostgreSQL, and the
benchmark's own clients (on a small machine they all share the same cores).

Then the lasting-rules case: `approval.requested`-heavy batches (125 steps of 4 events, each
step holding 2 calls: 250 held calls per 500 events) for a tenant with BENCH_RULES (500) active
rules that decide none of them (every call is still evaluated: 50 of the rules look at each
mail call's arguments) against a tenant with no rules, in the same run, alternating; and, for
scale, the same batches for a tenant whose rules approve every mail call (half the calls are
then settled by the one writer in the batch's transaction).

Knobs (env): BENCH_RUNS (runs per round, default 16), BENCH_BATCHES (batches per run, 4),
BENCH_CLIENTS (concurrent clients, 4), BENCH_ROUNDS (5), BENCH_SERVERS (daphne processes,
default one per CPU as a deployment runs them; the clients share them as a load balancer
would), BENCH_RULES (500), BENCH_INGEST (`all`, `plain` or `rules`: which cases). The GIL keeps
one process on one core, so processes are how one host scales.
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


def run_batches(batches: int, steps=None) -> list[list[dict]]:
    """`batches` batches of exactly 500 events with seqs 1..N and no gaps."""
    steps = steps or step_events
    events: list[dict] = []
    step = 0
    while len(events) < batches * BATCH:
        step += 1
        events += steps(step)
    events = events[: batches * BATCH]
    for seq, event in enumerate(events, start=1):
        event["seq"] = seq
    return [events[i : i + BATCH] for i in range(0, len(events), BATCH)]


def held_step_events(step: int) -> list[dict]:
    """One model step that holds two calls, as a runtime reports it: 4 events."""
    calls = [
        {
            "toolCallId": f"call_{step}_mail",
            "toolName": "email.send",
            "arguments": {"to": f"customer{step}@example.com", "subject": "Your order"},
            "reason": "mail leaves the company",
            "rejectionMessage": "The user declined to send this email.",
        },
        {
            "toolCallId": f"call_{step}_file",
            "toolName": "files.read",
            "arguments": {"path": f"/srv/orders/{step}.json"},
            "reason": "reads customer data",
            "rejectionMessage": "Not allowed.",
        },
    ]
    return [
        {"type": "step.started", "step": step, "agentId": "bench-bot", "model": "model-a"},
        {
            "type": "message",
            "step": step,
            "message": {
                "role": "assistant",
                "content": "Sending the confirmation.",
                "toolCalls": [
                    {"id": c["toolCallId"], "name": c["toolName"], "arguments": c["arguments"]}
                    for c in calls
                ],
            },
        },  # fmt: skip
        {"type": "approval.requested", "step": step, "calls": calls},
        {
            "type": "step.finished",
            "step": step,
            "model": "model-a",
            "finishReason": "tool_calls",
            "usage": {"inputTokens": 900, "outputTokens": 60, "costMinorUnits": 2},
        },
    ]


def held_batches(batches: int) -> list[list[dict]]:
    """`batches` batches of exactly 500 events, a quarter of them `approval.requested`."""
    return run_batches(batches, steps=held_step_events)


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


def console_round(
    bases: list[str], key: str, *, runs: int, batches: int, clients: int, plan=run_batches
) -> float:
    """Events per second through HTTP (admission not timed); client i talks to server i % n."""
    bodies = [json.dumps({"events": batch}).encode() for batch in plan(batches)]
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


# The rows the console derives from the log (besides the run's own row and the daily usage
# rollup, written below): what the baseline writes too, copied from a console run of the same
# plan so that both sides store exactly the same rows.
DERIVED = (
    "runs_step",
    "runs_message",
    "runs_toolresult",
    "runs_verdict",
    "runs_turnverdict",
    "runs_runtrace",
    "runs_handoff",
    "runs_usageadjustment",
)
# The usage rollups (table, its unique key): the console upserts into each once per batch.
ROLLUPS = (
    ("runs_usagedaily", ("tenant_id", "day", "principal_id", "agent_id", "model")),
    ("runs_usagedailyby", ("tenant_id", "dimension", "day", "key")),
)
RUN_TOTALS = (
    "last_seq",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost_minor_units",
    "usage_by_model",
    "current_agent_id",
)


def _columns(conn, table: str, skip=("id", "run_id")) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = %s ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [(name, kind) for name, kind in rows if name not in skip]


def _select(columns) -> str:
    return ", ".join(f"{n}::text" if k in ("json", "jsonb") else n for n, k in columns)


def _placeholders(columns) -> str:
    return ", ".join(f"%s::{k}" if k in ("json", "jsonb") else "%s" for _n, k in columns)


def derived_plan(dsn: str, run_pk: int, batches: int) -> list[list[tuple]]:
    """For each batch, the statements (SQL, rows) that store what the console stored for one
    run of the same plan, besides the log: every derived row (split into `batches` in the
    order the console inserted them), the daily usage rollup's upsert and the run's totals.
    Each statement is (SQL, rows, where each row takes the run's id: 0, -1 or None)."""
    plan: list[list[tuple]] = [[] for _ in range(batches)]
    with psycopg.connect(dsn) as conn:
        for table in DERIVED:
            columns = _columns(conn, table)
            rows = conn.execute(
                f"SELECT {_select(columns)} FROM {table} WHERE run_id = %s ORDER BY id",  # noqa: S608
                [run_pk],
            ).fetchall()
            names = ", ".join(n for n, _k in columns)
            sql = f"INSERT INTO {table} (run_id, {names}) VALUES (%s, {_placeholders(columns)})"  # noqa: S608
            size = -(-len(rows) // batches) if rows else 0
            for k in range(batches):
                if chunk := rows[k * size : (k + 1) * size]:
                    plan[k].append((sql, [(None, *row) for row in chunk], 0))
        # The rollups: per batch, one upsert per rollup table adding to the rows the console
        # keeps for the run's tenant on its day (as the console's upserts do).
        for table, unique in ROLLUPS:
            columns = _columns(conn, table, skip=("id",))
            if not columns:  # a rollup this schema does not have
                continue
            keys = [(n, k) for n, k in columns if n in unique]
            sums = [(n, k) for n, k in columns if n not in unique]
            rows = conn.execute(
                f"SELECT {_select(keys)} FROM {table} WHERE tenant_id = "  # noqa: S608
                "(SELECT tenant_id FROM runs_run WHERE id = %s) "
                f"AND day = (SELECT max(day) FROM {table} WHERE tenant_id = "
                "(SELECT tenant_id FROM runs_run WHERE id = %s))",
                [run_pk, run_pk],
            ).fetchall()
            names = ", ".join(n for n, _k in keys + sums)
            adds = ", ".join(f"{n} = {table}.{n} + excluded.{n}" for n, _k in sums)
            sql = (
                f"INSERT INTO {table} ({names}) VALUES ({_placeholders(keys + sums)}) "  # noqa: S608
                f"ON CONFLICT ({', '.join(unique)}) DO UPDATE SET {adds}"
            )
            for k in range(batches):
                plan[k].append((sql, [(*key, *([1] * len(sums))) for key in rows], None))
        # The run's own row: its totals, once per batch.
        total_columns = [(n, k) for n, k in _columns(conn, "runs_run") if n in RUN_TOTALS]
        (totals,) = conn.execute(
            f"SELECT {_select(total_columns)} FROM runs_run WHERE id = %s",  # noqa: S608
            [run_pk],
        ).fetchall()
        sets = ", ".join(
            f"{n} = {p}"
            for (n, _k), p in zip(
                total_columns, _placeholders(total_columns).split(", "), strict=True
            )
        )
        sql = f"UPDATE runs_run SET {sets}, updated_at = now() WHERE id = %s"  # noqa: S608
        for k in range(batches):
            plan[k].append((sql, [(*totals, None)], -1))
    return plan


def template_run(base: str, key: str, dsn: str, batches: int) -> int:
    """A run ingested by the console with the plan's batches (not timed): what it stored is
    what the baseline copies. Returns its primary key."""
    run_id = f"t_{secrets.token_hex(6)}"
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
        admit(client, run_id)
        for batch in run_batches(batches):
            client.post(f"/api/v1/runs/{run_id}/events", json={"events": batch}).raise_for_status()
    with psycopg.connect(dsn) as conn:
        ((pk,),) = conn.execute("SELECT id FROM runs_run WHERE external_id = %s", [run_id])
    return pk


def baseline_round(
    base: str,
    key: str,
    dsn: str,
    *,
    runs: int,
    batches: int,
    clients: int,
    per_row=False,
    derived=None,
) -> tuple[float, dict]:
    """Rows per second of raw psycopg executemany of the same RunEvent rows (one transaction
    per 500). psycopg 3 pipelines executemany: the 500 INSERTs go out in one round trip.
    `per_row`: one `execute` (one round trip) per row instead, the naive client.
    `derived` (from `derived_plan`): each batch's transaction also stores every row the console
    derives from those events, the rollup and the run's totals (the issue's baseline: "the same
    rows the console stores"); the figure is then events (log rows) per second."""
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
    more_of = {
        run_id: [
            [
                (statement, [_for_run(row, at, pks[run_id]) for row in rows])
                for statement, rows, at in batch
            ]
            for batch in derived
        ]
        for run_id in run_ids
    } if derived else {}  # fmt: skip

    def feed(conn, ids: list[str]) -> None:
        for run_id in ids:
            for k, rows in enumerate(rows_of[run_id]):
                with conn.cursor() as cur:
                    if per_row:
                        for row in rows:
                            cur.execute(sql, row)
                    else:
                        cur.executemany(sql, rows)
                    for statement, more in more_of[run_id][k] if derived else ():
                        cur.executemany(statement, more)
                conn.commit()

    seconds, cpu = timed(
        [run_ids[i::clients] for i in range(clients)], lambda: psycopg.connect(dsn), feed
    )
    return runs * batches * BATCH / seconds, per_batch(cpu, runs * batches)


def _for_run(row: tuple, at: int | None, run_pk: int) -> tuple:
    """A copied row for another run: its run id goes at `at` (None: the row has none)."""
    if at is None:
        return row
    row = list(row)
    row[at] = run_pk
    return tuple(row)


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
    cases = os.environ.get("BENCH_INGEST", "all")
    if cases not in ("all", "plain", "rules"):
        raise SystemExit("BENCH_INGEST is all, plain or rules")
    if cases in ("all", "plain"):
        plain_main()
    if cases in ("all", "rules"):
        rules_main()


def plain_main() -> None:
    dsn = _support.database_url()
    runs = _support.size("BENCH_RUNS", 16, 4)
    batches = _support.size("BENCH_BATCHES", 4, 1)
    clients = _support.size("BENCH_CLIENTS", 4, 2)
    rounds = _support.size("BENCH_ROUNDS", 5, 1)
    # One daphne process per core, as a deployment runs them (BENCH_SERVERS=1: one only).
    servers = _support.size("BENCH_SERVERS", os.cpu_count() or 1, 1)
    _support.migrate()
    _, key = _support.provision(scopes="ingest")
    print(
        f"ingest: {rounds} rounds of {runs} runs x {batches} batches x {BATCH} events, "
        f"{clients} concurrent clients, {servers} daphne process(es); "
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    console, same, log_only, console_cpu, same_cpu, log_cpu, naive = ([] for _ in range(7))
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(_support.daphne()) for _ in range(servers)]
        base = bases[0]
        console_round(bases, key, runs=clients, batches=1, clients=clients)  # warm-up
        derived = derived_plan(dsn, template_run(base, key, dsn, batches), batches)
        for i in range(rounds):
            rate, cpu = console_round(bases, key, runs=runs, batches=batches, clients=clients)
            console.append(rate)
            console_cpu.append(cpu)
            sizes = {"runs": runs, "batches": batches, "clients": clients}
            rate, cpu = baseline_round(base, key, dsn, derived=derived, **sizes)
            same.append(rate)
            same_cpu.append(cpu)
            rate, cpu = baseline_round(base, key, dsn, **sizes)
            log_only.append(rate)
            log_cpu.append(cpu)
            rate, _ = baseline_round(base, key, dsn, per_row=True, **sizes)
            naive.append(rate)
            print(
                f"  round {i + 1}: console {console[-1]:,.0f} events/s, "
                f"psycopg the same rows {same[-1]:,.0f} events/s, "
                f"psycopg the log rows only {log_only[-1]:,.0f} rows/s, "
                f"psycopg execute per log row {naive[-1]:,.0f} rows/s"
            )
    c, b, g = (_support.median(v) for v in (console, same, log_only))
    rows = sum(len(r) for batch in derived for _sql, r, _at in batch) / batches + BATCH
    print(f"ingest console (median): {c:,.0f} events/s")
    print(
        f"ingest baseline psycopg executemany of the same rows (~{rows:,.0f} a batch, median): "
        f"{b:,.0f} events/s"
    )
    print(f"ingest ratio console/baseline: {c / b:.2f} (target >= 1.0)")
    n = _support.median(naive)
    print(
        f"  for scale: psycopg executemany of the log rows only {g:,.0f} rows/s "
        f"(console/that {c / g:.2f}); execute per log row {n:,.0f} rows/s (console/that "
        f"{c / n:.2f})"
    )
    _support.record(
        "ingest",
        f"500-event batches over HTTP, {clients} clients, {servers} daphne(s)",
        f"{c:,.0f} events/s",
        baseline=(
            f"psycopg executemany of the same rows (log + derived, ~{rows:,.0f} a batch, one "
            f"transaction each) {b:,.0f} events/s; the log rows alone {g:,.0f} rows/s"
        ),
        ratio=c / b,
        target="ratio ≥ 1.0",
        met=c / b >= 1.0,
    )
    print(
        _cpu_line(
            "events, console",
            console_cpu,
            {"server": "daphne", "pg": "PostgreSQL", "client": "clients"},
        )
    )
    print(
        _cpu_line(
            "events, baseline (same rows)",
            same_cpu,
            {"pg": "PostgreSQL", "client": "psycopg client"},
        )
    )
    print(_cpu_line("rows, log only", log_cpu, {"pg": "PostgreSQL", "client": "psycopg client"}))
    print(f"  load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


# ---- lasting rules: 500 active rules against none ----


def bench_rules(count: int, *, deciding: bool) -> list[dict]:
    """`count` rule bodies of the kinds tenants write. None matches a bench call unless
    `deciding` (then the first approves every mail call): 60% literal tools of other agents'
    (each with a condition), 30% globs of other services (deny), 8% on `email.*` whose
    conditions the bench's mail fails (so each mail call runs them), 2% for every tool of
    another agent."""
    rules = []
    if deciding:
        rules.append(
            {
                "name": "mail",
                "effect": "approve",
                "toolPattern": "email.send",
                "conditions": [{"path": "to", "op": "endsWith", "value": "@example.com"}],
            }
        )
    for i in range(count - len(rules)):
        kind = i % 50
        if kind < 30:
            body = {
                "toolPattern": f"tool.{i}",
                "conditions": [{"path": "amount", "op": "lt", "value": i}],
            }
        elif kind < 45:
            body = {"toolPattern": f"svc{i}.*", "effect": "deny"}
        elif kind < 49:
            body = {
                "toolPattern": "email.*",
                "conditions": [
                    {"path": "subject", "op": "startsWith", "value": "Your"},
                    {"path": "to", "op": "endsWith", "value": f"@partner{i}.example"},
                ],
            }
        else:
            body = {"toolPattern": "*", "agentPattern": f"other-bot-{i}"}
        rules.append({"name": f"rule {i}", "effect": "approve", **body})
    return rules  # fmt: skip


def rules_tenant(base: str, rules: list[dict]) -> str:
    """A fresh tenant with these rules (made through the API by a lead's manage key); returns
    its ingest key."""
    _slug, key, manage_key = _support.provision_principal(
        "bench-lead", role="lead", key_scope="manage"
    )
    headers = {"Authorization": f"Bearer {manage_key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        for body in rules:
            response = client.post("/api/v1/rules", json=body)
            if response.status_code != 201:
                raise RuntimeError(f"{response.status_code}: {response.text[:500]}")
    return key


def rules_main() -> None:
    _support.database_url()
    runs = _support.size("BENCH_RUNS", 16, 4)
    batches = _support.size("BENCH_BATCHES", 4, 1)
    clients = _support.size("BENCH_CLIENTS", 4, 2)
    rounds = _support.size("BENCH_ROUNDS", 5, 1)
    servers = _support.size("BENCH_SERVERS", os.cpu_count() or 1, 1)
    count = _support.size("BENCH_RULES", 500, 20)
    _support.migrate()
    print(
        f"ingest with rules: {rounds} rounds of {runs} runs x {batches} batches x {BATCH} events "
        f"(250 held calls a batch), {clients} clients, {servers} daphne process(es), {count} "
        f"active rules vs none; load average before: {os.getloadavg()[0]:.2f}"
    )
    none, ruled, deciding = [], [], []
    size = {"runs": runs, "batches": batches, "clients": clients, "plan": held_batches}
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(_support.daphne()) for _ in range(servers)]
        _, key_none = _support.provision(scopes="ingest")
        key_rules = rules_tenant(bases[0], bench_rules(count, deciding=False))
        key_deciding = rules_tenant(bases[0], bench_rules(count, deciding=True))
        for key in (key_none, key_rules, key_deciding):  # warm-up: every process compiles
            console_round(bases, key, **{**size, "runs": clients * servers, "batches": 1})
        for i in range(rounds):
            first, second = (key_none, key_rules) if i % 2 == 0 else (key_rules, key_none)
            rates = {first: console_round(bases, first, **size)[0]}
            rates[second] = console_round(bases, second, **size)[0]
            none.append(rates[key_none])
            ruled.append(rates[key_rules])
            deciding.append(console_round(bases, key_deciding, **size)[0])
            print(
                f"  round {i + 1}: no rules {none[-1]:,.0f} events/s, {count} rules "
                f"{ruled[-1]:,.0f} events/s ({ruled[-1] / none[-1]:.2f}x), {count} rules "
                f"deciding every mail call {deciding[-1]:,.0f} events/s"
            )
    n, r, d = _support.median(none), _support.median(ruled), _support.median(deciding)
    print(f"ingest approval.requested, no rules (median): {n:,.0f} events/s")
    print(f"ingest approval.requested, {count} active rules (median): {r:,.0f} events/s")
    print(f"ingest ratio {count} rules/no rules: {r / n:.2f} (target >= 0.8)")
    _support.record(
        "ingest",
        f"approval.requested batches with {count} active rules deciding nothing",
        f"{r:,.0f} events/s",
        baseline=f"no rules {n:,.0f} events/s",
        ratio=r / n,
        target="ratio ≥ 0.8",
        met=r / n >= 0.8,
    )
    print(
        f"  for scale: {count} rules deciding half the calls (median) {d:,.0f} events/s, "
        f"{d / n:.2f}x no rules (decided calls are inserted decided)"
    )
    print(f"  load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
