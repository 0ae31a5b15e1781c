"""The SDK's budget check against a scripted console (httpx.MockTransport, no Django): the typed
answer, and the opt-in guard before a step: allowed, refused (the run finished with
`usageDenied` naming the budget), and over an `ask` budget waiting for the override."""

import asyncio
import json

import httpx
import pytest
from gavel_sdk import AsyncGavelClient, BudgetCheck, BudgetExceeded, GavelClient, RetryPolicy
from gavel_sdk.session import RunSession

from tests.support.sdk import run_body

FAST = RetryPolicy(attempts=2, base=0.0, cap=0.0)
BUDGET = {
    "id": "bdg_1",
    "name": "Support, monthly",
    "scope": {"type": "tenant", "id": None},
    "period": "month",
    "ceilingMinorUnits": 1000,
    "spentMinorUnits": 900,
    "remainingMinorUnits": 100,
    "ceilingTokens": None,
    "spentTokens": 5,
    "allowed": False,
}


def answer(allowed, *, approval=None, override=None, budgets=None):
    budgets = budgets if budgets is not None else [{**BUDGET, "allowed": allowed}]
    tripped = next((b for b in budgets if not b["allowed"]), None)
    return {
        "allowed": allowed,
        "budgets": budgets,
        "trippedBudget": tripped,
        "approvalId": approval,
        "overrideApprovalId": override,
    }


class Console:
    """Routes by path: admission, events (recorded), checks (scripted in order), decisions."""

    def __init__(self, checks, decisions=()):
        self.checks = list(checks)
        self.decisions = list(decisions)
        self.events: list[dict] = []
        self.check_bodies: list[dict] = []

    def __call__(self, request: httpx.Request):
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        if path == "/api/v1/runs":
            return httpx.Response(201, json=run_body(body["id"]))
        if path.endswith("/events"):
            self.events += body["events"]
            return httpx.Response(200, json={"lastSeq": body["events"][-1]["seq"]})
        if path == "/api/v1/budgets/check":
            self.check_bodies.append(body)
            return httpx.Response(200, json=self.checks.pop(0))
        if path.endswith("/decisions"):
            return httpx.Response(200, json=self.decisions.pop(0))
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})


def client(console):
    return GavelClient(
        "http://gavel.test", "gvl_key", retry=FAST, transport=httpx.MockTransport(console)
    )


def session(console, **kwargs):
    s = RunSession(client(console), "run_1", agent_id="bot", principal_id="alice", **kwargs)
    s.start()
    return s


def test_check_budget_sends_the_contracts_body_and_types_the_answer():
    console = Console([answer(False)])
    check = client(console).check_budget("run_1", 120, estimated_tokens=30)
    assert console.check_bodies == [
        {"runId": "run_1", "estimatedCostMinorUnits": 120, "estimatedTokens": 30}
    ]
    assert isinstance(check, BudgetCheck) and check.allowed is False
    assert check.tripped_budget.name == "Support, monthly"
    assert check.tripped_budget.scope_type == "tenant" and check.tripped_budget.scope_id is None
    assert check.budgets[0].remaining_minor_units == 100
    assert check.raw["budgets"][0]["id"] == "bdg_1"


def test_the_async_client_checks_too():
    console = Console([answer(True)])

    async def go():
        async with AsyncGavelClient(
            "http://gavel.test", "k", retry=FAST, transport=httpx.MockTransport(console)
        ) as gavel:
            return await gavel.check_budget("run_1", 5)

    assert asyncio.run(go()).allowed is True


def test_the_guard_lets_a_step_through_within_budget():
    console = Console([answer(True)])
    s = session(console, budget_estimate=lambda: 40, budget_tokens=7)
    assert s.before_step().allowed is True
    assert console.check_bodies[0]["estimatedCostMinorUnits"] == 40
    assert console.check_bodies[0]["estimatedTokens"] == 7
    assert console.events == []


def test_without_an_estimate_the_guard_does_nothing():
    console = Console([])
    assert session(console).before_step() is None
    assert console.check_bodies == []


def test_refused_the_run_finishes_with_usage_denied_naming_the_budget():
    console = Console([answer(False)])
    s = session(console, budget_estimate=200)
    with pytest.raises(BudgetExceeded, match="Support, monthly") as raised:
        s.before_step()
    assert raised.value.check.tripped_budget.id == "bdg_1"
    [finished] = console.events
    assert finished["type"] == "run.finished" and finished["status"] == "aborted"
    assert finished["finishReason"] == "budget"
    assert finished["usageDenied"] == {
        "estimatedCostMinorUnits": 200,
        "estimatedTokens": 0,
        "budgetId": "bdg_1",
        "budgetName": "Support, monthly",
        "scope": {"type": "tenant", "id": None},
        "ceilingMinorUnits": 1000,
        "spentMinorUnits": 900,
    }


def decisions(decision):
    return {
        "complete": True,
        "pending": [],
        "cursor": "1",
        "decisions": [
            {
                "approvalId": "apr_1",
                "toolCallId": "budget.override:bdg_1:x",
                "decision": decision,
                "message": None if decision == "approved" else "no",
                "arguments": None,
                "decidedBy": "lena",
                "decidedAt": "2026-12-02T10:00:00Z",
            }
        ],
    }


def test_over_an_ask_budget_the_guard_waits_and_an_approval_lets_the_step_through():
    console = Console(
        [answer(False, approval="apr_1"), answer(True, override="apr_1")],
        [decisions("approved")],
    )
    waited = []

    class Slot:
        def __enter__(self):
            waited.append("released")

        def __exit__(self, *exc):
            waited.append("taken")

    check = session(console, budget_estimate=200).before_step(waiting=Slot)
    assert check.allowed and check.override_approval_id == "apr_1"
    assert len(console.check_bodies) == 2  # the second check uses the grant
    assert waited == ["released", "taken"]
    assert console.events == []


def test_a_denied_override_finishes_the_run():
    console = Console([answer(False, approval="apr_1")], [decisions("denied")])
    with pytest.raises(BudgetExceeded):
        session(console, budget_estimate=200).before_step()
    assert console.events[-1]["usageDenied"]["approvalId"] == "apr_1"
    assert len(console.check_bodies) == 1


def test_the_pydantic_ai_adapter_checks_before_invoking_the_model():
    pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is in the sdk test extra")
    from gavel_sdk.adapters.pydantic_ai import GavelPydanticAI
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    calls = []

    def model(messages, info):
        calls.append(messages)
        return ModelResponse(parts=[TextPart("hi")], model_name="m")

    console = Console([answer(False)])
    gavel_run = GavelPydanticAI(
        client(console), run_id="run_1", agent_id="bot", principal_id="alice", budget_estimate=50
    )
    with pytest.raises(BudgetExceeded):
        gavel_run.run_sync(Agent(FunctionModel(model)), "hello")
    assert calls == []  # refused before the model ran
    assert [e["type"] for e in console.events] == ["run.finished"]  # finished once
    console = Console([answer(True)])
    gavel_run = GavelPydanticAI(
        client(console), run_id="run_1", agent_id="bot", principal_id="alice", budget_estimate=50
    )
    assert gavel_run.run_sync(Agent(FunctionModel(model)), "hello").output == "hi"
    assert len(console.check_bodies) == 1 and len(calls) == 1
