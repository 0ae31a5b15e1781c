"""The client's logic, written once for the sync and async forms (sans I/O).

Each operation is a generator that yields `Call` (an HTTP request to make) or `Sleep` (a
backoff pause) and receives the `httpx.Response`, or has the transport error thrown in. The
clients in `client.py` only drive these generators with their own transport and sleep.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from gavel_sdk import errors
from gavel_sdk.types import Decision, Decisions

MAX_BATCH = 500  # the contract's events per request
MAX_WAIT = 30.0  # the contract's longest long-poll hold


@dataclass
class Call:
    method: str
    path: str
    json: Any = None
    params: dict | None = None
    timeout: float | None = None  # None: the client's default


@dataclass
class Sleep:
    seconds: float


@dataclass
class RetryPolicy:
    """Network errors, 5xx and 429 are retried with exponential backoff (plus jitter), honouring
    `Retry-After`. Every request the SDK makes is safe to repeat under the contract."""

    attempts: int = 10
    base: float = 0.2
    cap: float = 5.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        backoff = min(self.cap, self.base * (2**attempt)) * (0.75 + random.random() / 2)
        return max(backoff, retry_after or 0.0)


@dataclass
class SeqState:
    """The last seq this client knows the server holds, per run (None: not known yet)."""

    last: dict[str, int] = field(default_factory=dict)


Op = Generator[Call | Sleep, Any, Any]


def path(*parts: str) -> str:
    return "/api/v1/" + "/".join(quote(p, safe="") for p in parts)


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("Retry-After")
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def request(call: Call, policy: RetryPolicy) -> Op:
    """One request with retries; returns (status, json body) of a 2xx, raises GavelError."""
    last_error: errors.GavelError | None = None
    for attempt in range(policy.attempts):
        if attempt:
            yield Sleep(policy.delay(attempt - 1, last_error and last_error.retry_after))
        try:
            response = yield call
        except httpx.TransportError as exc:
            last_error = errors.ConnectionFailed(
                f"{call.method} {call.path}: {exc.__class__.__name__}: {exc}",
                code="connection_failed",
            )
            continue
        body = _body(response)
        if response.status_code < 400:
            return response.status_code, body
        error = errors.error_from_response(response.status_code, body, _retry_after(response))
        if response.status_code < 500 and response.status_code != 429:
            raise error
        last_error = error
    assert last_error is not None
    raise last_error


# --- runs ---


def admit_run(seqs: SeqState, policy: RetryPolicy, body: dict) -> Op:
    status, run = yield from request(Call("POST", path("runs"), json=body), policy)
    seqs.last[run["id"]] = int(run.get("lastSeq", 0))
    return status == 201, run


def get_run(seqs: SeqState, policy: RetryPolicy, run_id: str) -> Op:
    _, run = yield from request(Call("GET", path("runs", run_id)), policy)
    seqs.last.setdefault(run_id, int(run.get("lastSeq", 0)))
    return run


def list_runs(policy: RetryPolicy, params: dict) -> Op:
    params = {k: v for k, v in params.items() if v is not None}
    _, page = yield from request(Call("GET", path("runs"), params=params), policy)
    return page


def _numbered(events: list[dict], first: int) -> list[dict]:
    return [{**event, "seq": first + i} for i, event in enumerate(events)]


def send_events(
    seqs: SeqState, policy: RetryPolicy, run_id: str, events: list[dict], batch: int
) -> Op:
    """Number the events after the run's last seq, post them in batches, and resync on a gap.

    A retried batch keeps its seqs, so the server skips what it already holds (exactly once).
    A `seq_gap` 409 means none of the batch is held (batches are atomic): renumber from the
    server's `expectedSeq` and send again.
    """
    if run_id not in seqs.last:
        yield from get_run(seqs, policy, run_id)
    pending = [{k: v for k, v in e.items() if k != "seq"} for e in events]
    last_seq = seqs.last[run_id]
    resyncs = 0
    while pending:
        chunk = _numbered(pending[:batch], seqs.last[run_id] + 1)
        call = Call("POST", path("runs", run_id, "events"), json={"events": chunk})
        try:
            _, answer = yield from request(call, policy)
        except errors.SeqGap as gap:
            resyncs += 1
            if resyncs > 3:
                raise
            seqs.last[run_id] = gap.expected_seq - 1
            continue
        seqs.last[run_id] = chunk[-1]["seq"]
        last_seq = int(answer["lastSeq"])
        pending = pending[batch:]
    return last_seq


def put_state(policy: RetryPolicy, run_id: str, state: dict) -> Op:
    status, run = yield from request(Call("PUT", path("runs", run_id, "state"), json=state), policy)
    return status == 201, run


def get_state(policy: RetryPolicy, run_id: str) -> Op:
    _, state = yield from request(Call("GET", path("runs", run_id, "state")), policy)
    return state


def post_outcome(seqs: SeqState, policy: RetryPolicy, run_id: str, outcome: dict) -> Op:
    call = Call("POST", path("runs", run_id, "outcome"), json=outcome)
    _, run = yield from request(call, policy)
    seqs.last[run_id] = int(run.get("lastSeq", 0))
    return run


# --- decisions and approvals ---


def wait_for_decisions(
    policy: RetryPolicy,
    run_id: str,
    *,
    timeout: float,
    tool_call_ids: list[str] | None,
    after: str,
    clock,
    http_timeout: float,
) -> Op:
    """Long-poll until the calls are decided (every pending call of the run, or the ones named)
    or `timeout` seconds pass. Reads with a cursor (`after`), so a lost answer is replayed."""
    deadline = clock() + timeout
    seen: dict[str, Decision] = {}
    wanted = set(tool_call_ids or [])
    cursor = after
    while True:
        hold = max(0.0, min(MAX_WAIT, deadline - clock()))
        call = Call(
            "GET",
            path("runs", run_id, "decisions"),
            params={"wait": f"{hold:.1f}", "after": cursor},
            timeout=hold + http_timeout,
        )
        _, answer = yield from request(call, policy)
        cursor = answer["cursor"]
        for item in answer["decisions"]:
            decision = Decision.from_wire(item)
            seen[decision.tool_call_id] = decision
        pending = list(answer["pending"])
        done = wanted <= set(seen) if wanted else answer["complete"]
        # Nothing pending and nothing new: no decision can come any more, so stop either way.
        # (A decision landing while the server builds its answer can leave it "complete"
        # without that decision, which the next read after `cursor` brings: read again.)
        settled = answer["complete"] and not answer["decisions"]
        if done or settled or clock() >= deadline:
            still = [c for c in wanted if c not in seen] if wanted else pending
            return Decisions(complete=done, decisions=seen, pending=still, cursor=cursor)


def decide(policy: RetryPolicy, approval_id: str, body: dict) -> Op:
    call = Call("POST", path("approvals", approval_id, "decision"), json=body)
    _, approval = yield from request(call, policy)
    return approval


def list_approvals(policy: RetryPolicy, params: dict) -> Op:
    params = {k: v for k, v in params.items() if v is not None}
    _, page = yield from request(Call("GET", path("approvals"), params=params), policy)
    return page


# --- budgets ---


def check_budget(policy: RetryPolicy, body: dict) -> Op:
    """POST /budgets/check. Safe to retry: a pending override is answered again, not asked
    twice; an approved one is used up by the first check that reaches the server."""
    _, answer = yield from request(Call("POST", path("budgets", "check"), json=body), policy)
    return answer
