"""Snapshot ingest: a 200-step, 2,000-message RunState PUT through a real daphne on PostgreSQL,
then the same state again (which must be found unchanged by its digest).

Targets (issue #3): the first PUT answers in under 1 s; the identical PUT is at least 5x faster.
Same-run baselines: raw psycopg inserting the same 2,000 message and 200 step rows in one
transaction (the floor of what a first PUT must write), and `GET /api/v1/runs/{id}` of the
same run on the same server (the floor of any authenticated request that reads the run).

Knobs (env): BENCH_ROUNDS (default 5), BENCH_STEPS (200), BENCH_MESSAGES (2000).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time

import httpx
import psycopg

from bench import _support

REPEAT = 5


def big_state(run_id: str, *, steps: int, messages: int) -> dict:
    """A RunState as Graphorin would checkpoint it at an awaiting-approval boundary."""
    per_step = max(1, messages // steps)
    msgs: list[dict] = [{"role": "user", "content": "Reconcile the March invoices, please."}]
    step_rows = []
    for n in range(1, steps + 1):
        call = f"call_{n}"
        step_rows.append(
            {
                "stepNumber": n,
                "agentId": "bench-bot",
                "model": "model-a",
                "usage": {"inputTokens": 1200, "outputTokens": 80, "costMinorUnits": 3},
                "startedAt": f"2026-12-02T10:{n // 60:02d}:{n % 60:02d}.000Z",
                "finishedAt": f"2026-12-02T10:{n // 60:02d}:{n % 60:02d}.500Z",
            }
        )
        msgs.append(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": f"Checking invoice {n} against the ledger."}],
                "toolCalls": [{"id": call, "name": "lookup_invoice", "arguments": {"n": n}}],
            }
        )
        msgs.append({"role": "tool", "content": '{"status": "matched"}', "toolCallId": call})
        msgs += [
            {"role": "assistant", "content": f"Invoice {n}, line {i}: amounts agree."}
            for i in range(per_step - 2)
        ]
    msgs = msgs[:messages]
    return {
        "id": run_id,
        "agentId": "bench-bot",
        "currentAgentId": "bench-bot",
        "sessionId": "bench-conversation",
        "userId": "bench@example.com",
        "status": "awaiting_approval",
        "steps": step_rows,
        "messages": msgs,
        "pendingApprovals": [
            {
                "toolCallId": f"pay_{i}",
                "toolName": "pay_invoice",
                "arguments": {"invoice": i},
                "reason": "payments need a human",
                "rejectionMessage": "The user declined the payment.",
            }
            for i in range(2)
        ],
        "handoffs": [],
        "usage": {
            "inputTokens": 1200 * steps,
            "outputTokens": 80 * steps,
            "costMinorUnits": 3 * steps,
        },
        "todos": [{"id": "t1", "content": "reconcile March", "status": "in_progress"}],
        "verdicts": {
            f"{n}:0": {"verdict": "allowed", "guard": "pii", "reason": ""}
            for n in range(1, steps + 1)
        },
        "taintSummary": {"untrustedInput": False},
        "startedAt": "2026-12-02T10:00:00.000Z",
    }


def timed(client: httpx.Client, method: str, url: str, **kwargs) -> tuple[float, int]:
    started = time.perf_counter()
    response = client.request(method, url, **kwargs)
    elapsed = time.perf_counter() - started
    if response.status_code >= 300:
        raise RuntimeError(f"{method} {url}: {response.status_code} {response.text[:500]}")
    return elapsed, response.status_code


def console_round(client: httpx.Client, *, steps: int, messages: int) -> tuple[float, float, float]:
    """(first PUT, identical PUT, GET run) seconds for a fresh run; the last two are the
    median of REPEAT tries each, interleaved, so that a busy moment hits both alike."""
    run_id = f"snap_{secrets.token_hex(6)}"
    body = json.dumps(big_state(run_id, steps=steps, messages=messages)).encode()
    first, status = timed(client, "PUT", f"/api/v1/runs/{run_id}/state", content=body)
    assert status == 201, status
    agains, reads = [], []
    for _ in range(REPEAT):
        again, status = timed(client, "PUT", f"/api/v1/runs/{run_id}/state", content=body)
        assert status == 200, status
        agains.append(again)
        reads.append(timed(client, "GET", f"/api/v1/runs/{run_id}")[0])
    return first, _support.median(agains), _support.median(reads)


def baseline_round(dsn: str, run_pk: int, *, steps: int, messages: int) -> float:
    """Seconds for raw psycopg to insert the same message and step rows in one transaction."""
    state = big_state("baseline", steps=steps, messages=messages)
    message_rows = [
        (run_pk, 1_000_000 + i, m["role"], json.dumps(m["content"]), json.dumps(m.get("toolCalls")))
        for i, m in enumerate(state["messages"])
    ]
    step_rows = [
        (run_pk, 1_000_000 + s["stepNumber"], s["agentId"], s["model"]) for s in state["steps"]
    ]
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO runs_message (run_id, position, role, content, tool_calls, created_at)"
                " VALUES (%s, %s, %s, %s, %s, now())",
                message_rows,
            )
            cur.executemany(
                "INSERT INTO runs_step (run_id, number, agent_id, model, input_tokens,"
                " output_tokens, cost_minor_units, started_at)"
                " VALUES (%s, %s, %s, %s, 0, 0, 0, now())",
                step_rows,
            )
        conn.commit()
        return time.perf_counter() - started


def baseline_run_pk(dsn: str, client: httpx.Client) -> int:
    run_id = f"snapbase_{secrets.token_hex(6)}"
    body = {"id": run_id, "agentId": "bench-bot", "agentVersion": 1, "principalId": "bench@x"}
    client.post("/api/v1/runs", json=body).raise_for_status()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT id FROM runs_run WHERE external_id = %s", [run_id]).fetchone()
    return row[0]


def main() -> None:
    dsn = _support.database_url()
    rounds = _support.size("BENCH_ROUNDS", 5, 1)
    steps = _support.size("BENCH_STEPS", 200, 200)
    messages = _support.size("BENCH_MESSAGES", 2000, 2000)
    _support.migrate()
    _, key = _support.provision(scopes="ingest")
    size = len(json.dumps(big_state("x", steps=steps, messages=messages)))
    print(
        f"snapshots: {rounds} rounds, a {steps}-step, {messages}-message RunState ({size:,} bytes)"
    )
    firsts, agains, reads, baselines = [], [], [], []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with (
        _support.daphne() as base,
        httpx.Client(base_url=base, headers=headers, timeout=60) as client,
    ):
        console_round(client, steps=steps, messages=messages)  # warm-up
        for i in range(rounds):
            first, again, read = console_round(client, steps=steps, messages=messages)
            floor = baseline_round(
                dsn, baseline_run_pk(dsn, client), steps=steps, messages=messages
            )
            firsts.append(first), agains.append(again), reads.append(read), baselines.append(floor)
            print(
                f"  round {i + 1}: first PUT {first * 1000:.0f} ms, identical PUT "
                f"{again * 1000:.0f} ms, GET run {read * 1000:.0f} ms, "
                f"psycopg rows {floor * 1000:.0f} ms"
            )
    first, again = _support.median(firsts), _support.median(agains)
    read, floor = _support.median(reads), _support.median(baselines)
    print(f"snapshots first PUT (median): {first * 1000:.0f} ms (target < 1000 ms)")
    print(f"snapshots identical PUT (median): {again * 1000:.0f} ms")
    print(f"snapshots ratio first/identical: {first / again:.1f}x (target >= 5x)")
    print(
        f"snapshots baseline psycopg executemany of the same rows (median): {floor * 1000:.0f} ms"
    )
    print(f"snapshots ratio first PUT/psycopg rows: {first / floor:.2f}")
    print(f"snapshots baseline GET run (median): {read * 1000:.1f} ms")
    print(f"snapshots ratio identical PUT/GET run: {again / read:.2f}")
    print(f"  load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    what = f"{steps}-step, {messages}-message RunState ({size:,} bytes)"
    _support.record(
        "snapshots",
        f"first PUT of a {what}",
        f"{first * 1000:.0f} ms",
        baseline=f"psycopg executemany of the same rows {floor * 1000:.0f} ms",
        ratio=first / floor,
        target="< 1 s",
        met=first < 1.0,
    )
    _support.record(
        "snapshots",
        "identical second PUT",
        f"{again * 1000:.1f} ms",
        baseline=f"GET run {read * 1000:.1f} ms",
        ratio=again / read,
        target="first / identical ≥ 5×",
        met=first / again >= 5,
    )
    if first >= 1.0 or first / again < 5:
        sys.exit("snapshots: a target was missed")
