"""`GavelClient` and `AsyncGavelClient`: the wire contract for agent runtimes.

Both forms share one implementation (`_ops`); they differ only in how they send and sleep.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from gavel_sdk import _ops
from gavel_sdk.errors import DecisionsTimeout
from gavel_sdk.types import Approval, ApprovalPage, BudgetCheck, Decisions, Run, RunPage

DEFAULT_TIMEOUT = 10.0


def _admission(
    *,
    run_id: str,
    agent_id: str,
    agent_version: int,
    principal_id: str,
    role_ids: list[str] | None,
    conversation_id: str | None,
    parent_run_id: str | None,
    input: Any,
    limits: dict | None,
    started_at: str | None,
) -> dict:
    body = {
        "id": run_id,
        "agentId": agent_id,
        "agentVersion": agent_version,
        "principalId": principal_id,
        "roleIds": role_ids,
        "conversationId": conversation_id,
        "parentRunId": parent_run_id,
        "input": input,
        "limits": limits,
        "startedAt": started_at,
    }
    return {k: v for k, v in body.items() if v is not None}


def _check_body(run_id: str, estimated_cost_minor_units: int, estimated_tokens: int) -> dict:
    return {
        "runId": run_id,
        "estimatedCostMinorUnits": estimated_cost_minor_units,
        "estimatedTokens": estimated_tokens,
    }


def _decision_body(decision: str, message: str | None, arguments: Any, edit: bool) -> dict:
    body: dict[str, Any] = {"decision": decision}
    if message is not None:
        body["message"] = message
    if edit:
        body["arguments"] = arguments
    return body


_UNSET: Any = object()


class _Base:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: _ops.RetryPolicy | None = None,
        batch_size: int = _ops.MAX_BATCH,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ):
        if not 1 <= batch_size <= _ops.MAX_BATCH:
            raise ValueError(f"batch_size must be 1..{_ops.MAX_BATCH}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or _ops.RetryPolicy()
        self.batch_size = batch_size
        self._seqs = _ops.SeqState()
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": "gavel-sdk/0.1",
            "Accept": "application/json",
        }
        self._transport = transport

    def last_seq(self, run_id: str) -> int | None:
        """The last seq this client knows the server holds for the run (None: unknown)."""
        return self._seqs.last.get(run_id)

    def _http_args(self, call: _ops.Call) -> dict:
        return {
            "method": call.method,
            "url": call.path,
            "json": call.json,
            "params": call.params,
            "timeout": call.timeout if call.timeout is not None else self.timeout,
        }


class GavelClient(_Base):
    """The synchronous client. `with GavelClient(url, key) as gavel: ...` closes it after."""

    def __init__(self, base_url: str, api_key: str, **kwargs):
        super().__init__(base_url, api_key, **kwargs)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, transport=self._transport
        )

    def __enter__(self) -> GavelClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _drive(self, op: _ops.Op) -> Any:
        step = next(op)
        while True:
            try:
                if isinstance(step, _ops.Sleep):
                    time.sleep(step.seconds)
                    step = op.send(None)
                    continue
                try:
                    response = self._http.request(**self._http_args(step))
                except httpx.TransportError as exc:
                    step = op.throw(exc)
                    continue
                step = op.send(response)
            except StopIteration as stop:
                return stop.value

    # runs

    def admit_run(
        self,
        run_id: str,
        *,
        agent_id: str,
        principal_id: str,
        agent_version: int = 0,
        role_ids: list[str] | None = None,
        conversation_id: str | None = None,
        parent_run_id: str | None = None,
        input: Any = None,
        limits: dict | None = None,
        started_at: str | None = None,
    ) -> Run:
        """Admit a run (idempotent: the same body again answers the run as held)."""
        body = _admission(**{k: v for k, v in locals().items() if k != "self"})
        _, run = self._drive(_ops.admit_run(self._seqs, self.retry, body))
        return Run.from_wire(run)

    def get_run(self, run_id: str) -> Run:
        return Run.from_wire(self._drive(_ops.get_run(self._seqs, self.retry, run_id)))

    def list_runs(self, **filters) -> RunPage:
        """Runs newest first: `principal_id`, `conversation_id`, `agent_id`, `status`,
        `limit`, `cursor`."""
        page = self._drive(_ops.list_runs(self.retry, _camel(filters)))
        return RunPage([Run.from_wire(r) for r in page["items"]], page.get("nextCursor"))

    def send_events(self, run_id: str, events: list[dict]) -> int:
        """Append events (dicts without `seq`: the client numbers them); returns lastSeq."""
        if not events:
            return self._seqs.last.get(run_id, 0)
        op = _ops.send_events(self._seqs, self.retry, run_id, events, self.batch_size)
        return self._drive(op)

    def put_state(self, run_id: str, state: dict) -> Run:
        _, run = self._drive(_ops.put_state(self.retry, run_id, state))
        return Run.from_wire(run)

    def get_state(self, run_id: str) -> dict:
        return self._drive(_ops.get_state(self.retry, run_id))

    def post_outcome(self, run_id: str, outcome: dict) -> Run:
        return Run.from_wire(
            self._drive(_ops.post_outcome(self._seqs, self.retry, run_id, outcome))
        )

    # decisions and approvals

    def wait_for_decisions(
        self,
        run_id: str,
        timeout: float = 300.0,
        *,
        tool_call_ids: list[str] | None = None,
        after: str = "0",
        raise_on_timeout: bool = False,
    ) -> Decisions:
        """Long-poll until every pending call of the run (or each of `tool_call_ids`) is
        decided or expired, or `timeout` seconds pass."""
        op = _ops.wait_for_decisions(
            self.retry,
            run_id,
            timeout=timeout,
            tool_call_ids=tool_call_ids,
            after=after,
            clock=time.monotonic,
            http_timeout=self.timeout,
        )
        return _checked(self._drive(op), raise_on_timeout)

    def decide(
        self, approval_id: str, decision: str, *, message: str | None = None, arguments=_UNSET
    ) -> Approval:
        """Decide a held call with a `decide` key: `decision` is "approve" or "deny"."""
        body = _decision_body(decision, message, arguments, arguments is not _UNSET)
        return Approval.from_wire(self._drive(_ops.decide(self.retry, approval_id, body)))

    def list_approvals(self, **filters) -> ApprovalPage:
        """Approvals (`decide` key): `status`, `run_id`, `limit`, `cursor`."""
        page = self._drive(_ops.list_approvals(self.retry, _camel(filters)))
        return ApprovalPage([Approval.from_wire(a) for a in page["items"]], page.get("nextCursor"))

    # budgets

    def check_budget(
        self, run_id: str, estimated_cost_minor_units: int, estimated_tokens: int = 0
    ) -> BudgetCheck:
        """May the run spend this much on its next step? Spends nothing. Over an `ask` budget
        the answer carries the override approval asked for (`approval_id`): wait for it with
        `wait_for_decisions`, then check again."""
        body = _check_body(run_id, estimated_cost_minor_units, estimated_tokens)
        return BudgetCheck.from_wire(self._drive(_ops.check_budget(self.retry, body)))


class AsyncGavelClient(_Base):
    """The asyncio client: the same methods as `GavelClient`, awaited."""

    def __init__(self, base_url: str, api_key: str, **kwargs):
        super().__init__(base_url, api_key, **kwargs)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, transport=self._transport
        )

    async def __aenter__(self) -> AsyncGavelClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _drive(self, op: _ops.Op) -> Any:
        step = next(op)
        while True:
            try:
                if isinstance(step, _ops.Sleep):
                    await asyncio.sleep(step.seconds)
                    step = op.send(None)
                    continue
                try:
                    response = await self._http.request(**self._http_args(step))
                except httpx.TransportError as exc:
                    step = op.throw(exc)
                    continue
                step = op.send(response)
            except StopIteration as stop:
                return stop.value

    async def admit_run(
        self,
        run_id: str,
        *,
        agent_id: str,
        principal_id: str,
        agent_version: int = 0,
        role_ids: list[str] | None = None,
        conversation_id: str | None = None,
        parent_run_id: str | None = None,
        input: Any = None,
        limits: dict | None = None,
        started_at: str | None = None,
    ) -> Run:
        body = _admission(**{k: v for k, v in locals().items() if k != "self"})
        _, run = await self._drive(_ops.admit_run(self._seqs, self.retry, body))
        return Run.from_wire(run)

    async def get_run(self, run_id: str) -> Run:
        return Run.from_wire(await self._drive(_ops.get_run(self._seqs, self.retry, run_id)))

    async def list_runs(self, **filters) -> RunPage:
        page = await self._drive(_ops.list_runs(self.retry, _camel(filters)))
        return RunPage([Run.from_wire(r) for r in page["items"]], page.get("nextCursor"))

    async def send_events(self, run_id: str, events: list[dict]) -> int:
        if not events:
            return self._seqs.last.get(run_id, 0)
        op = _ops.send_events(self._seqs, self.retry, run_id, events, self.batch_size)
        return await self._drive(op)

    async def put_state(self, run_id: str, state: dict) -> Run:
        _, run = await self._drive(_ops.put_state(self.retry, run_id, state))
        return Run.from_wire(run)

    async def get_state(self, run_id: str) -> dict:
        return await self._drive(_ops.get_state(self.retry, run_id))

    async def post_outcome(self, run_id: str, outcome: dict) -> Run:
        op = _ops.post_outcome(self._seqs, self.retry, run_id, outcome)
        return Run.from_wire(await self._drive(op))

    async def wait_for_decisions(
        self,
        run_id: str,
        timeout: float = 300.0,
        *,
        tool_call_ids: list[str] | None = None,
        after: str = "0",
        raise_on_timeout: bool = False,
    ) -> Decisions:
        op = _ops.wait_for_decisions(
            self.retry,
            run_id,
            timeout=timeout,
            tool_call_ids=tool_call_ids,
            after=after,
            clock=time.monotonic,
            http_timeout=self.timeout,
        )
        return _checked(await self._drive(op), raise_on_timeout)

    async def decide(
        self, approval_id: str, decision: str, *, message: str | None = None, arguments=_UNSET
    ) -> Approval:
        body = _decision_body(decision, message, arguments, arguments is not _UNSET)
        return Approval.from_wire(await self._drive(_ops.decide(self.retry, approval_id, body)))

    async def list_approvals(self, **filters) -> ApprovalPage:
        page = await self._drive(_ops.list_approvals(self.retry, _camel(filters)))
        return ApprovalPage([Approval.from_wire(a) for a in page["items"]], page.get("nextCursor"))

    async def check_budget(
        self, run_id: str, estimated_cost_minor_units: int, estimated_tokens: int = 0
    ) -> BudgetCheck:
        body = _check_body(run_id, estimated_cost_minor_units, estimated_tokens)
        return BudgetCheck.from_wire(await self._drive(_ops.check_budget(self.retry, body)))


def _camel(filters: dict) -> dict:
    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(p.title() for p in rest)

    return {camel(k): v for k, v in filters.items()}


def _checked(decisions: Decisions, raise_on_timeout: bool) -> Decisions:
    if raise_on_timeout and not decisions.complete:
        raise DecisionsTimeout(
            f"calls still pending: {', '.join(decisions.pending)}",
            pending=decisions.pending,
            decisions=decisions,
        )
    return decisions
