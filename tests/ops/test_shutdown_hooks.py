"""The one SIGTERM mechanism: ops/context.py's shutdown hooks, which ops/serving.py's drain runs
and every app registers into (the held long-polls and sockets of ops/serving.py itself, the MCP
gateway's waiting calls). The live SIGTERM tests are tests/ops/test_graceful.py and
tests/gateway/test_gateway_live.py::test_sigterm_answers_a_waiting_call_with_call_again_at_once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gateway import flow
from gateway import shutdown as gateway_shutdown
from ops import context, serving


@pytest.fixture
def hooks(monkeypatch):
    """The registry as the process has it, restored afterwards."""
    saved = dict(context._hooks)
    yield context._hooks
    context._hooks.clear()
    context._hooks.update(saved)


def test_the_process_registers_the_gateway_and_the_servers_own_hooks():
    names = list(context._hooks)
    assert gateway_shutdown.NAME in names  # gateway/apps.py
    assert "held long-polls answered" in names  # ops/serving.py
    assert "sockets closed with 1012" in names
    assert context._hooks[gateway_shutdown.NAME] is gateway_shutdown.answer_waiting
    # the records of results answered are written after the requests in flight finished
    assert context._final_hooks[gateway_shutdown.RECORDED] is gateway_shutdown.record_answered
    assert gateway_shutdown.RECORDED not in names


@pytest.mark.asyncio
async def test_after_requests_hooks_run_only_in_their_phase():
    saved = dict(context._final_hooks)
    ran = []
    try:
        context._final_hooks.clear()

        async def flush():
            ran.append("flush")
            return 3

        context.on_shutdown("flushed", flush, after_requests=True)
        assert "flushed" not in context._hooks
        first = await context.run_shutdown_hooks()
        assert "flushed" not in first and ran == []
        assert await context.run_shutdown_hooks(after_requests=True) == {"flushed": 3}
        assert ran == ["flush"]
    finally:
        context._final_hooks.clear()
        context._final_hooks.update(saved)


@pytest.mark.asyncio
async def test_hooks_run_in_order_async_ones_awaited_a_failure_does_not_stop_the_rest(hooks):
    hooks.clear()
    ran = []

    def first():
        ran.append("first")
        return 2

    async def second():
        await asyncio.sleep(0)
        ran.append("second")
        return 1

    def broken():
        ran.append("broken")
        raise RuntimeError("boom")

    context.on_shutdown("first", first)
    context.on_shutdown("broken", broken)
    context.on_shutdown("second", second)
    context.on_shutdown("first", lambda: ran.append("first again") or 3)  # replaced, in place
    assert await context.run_shutdown_hooks() == {"first": 3, "broken": None, "second": 1}
    assert ran == ["first again", "broken", "second"]


@pytest.mark.asyncio
async def test_the_gateways_hook_answers_every_waiting_call(hooks, monkeypatch):
    monkeypatch.setattr(flow.Waiting, "stopping", False)
    monkeypatch.setattr(flow.Waiting, "held", 2)

    class Waiter:  # what flow keeps of a held call: its wake-up event
        def __init__(self):
            self.event = asyncio.Event()

    waiters = [Waiter(), Waiter()]
    monkeypatch.setattr(flow.Waiting, "waiters", set(waiters))
    done = await context.run_shutdown_hooks()
    assert done[gateway_shutdown.NAME] == 2
    assert flow.Waiting.stopping is True
    assert all(w.event.is_set() for w in waiters)


@pytest.mark.asyncio
async def test_the_drain_runs_the_hooks_then_waits_for_requests_in_flight(hooks, monkeypatch):
    hooks.clear()
    monkeypatch.setattr(serving, "_grace", lambda: 5.0)
    loop = asyncio.get_running_loop()
    answered = loop.create_future()
    in_flight = loop.create_future()  # a request the hook's answer finishes

    def answer():
        answered.set_result(True)
        loop.call_later(0.2, in_flight.set_result, None)
        return 1

    context.on_shutdown("answered", answer)
    server = SimpleNamespace(connections={1: {"application_instance": in_flight}})
    started = loop.time()
    await serving.drain(server)
    assert answered.done() and in_flight.done()
    assert 0.2 <= loop.time() - started < 2
