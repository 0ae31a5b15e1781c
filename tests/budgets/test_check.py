"""POST /api/v1/budgets/check: the run's limit and its budgets narrowest first, the tripped one
named; over an `ask` budget, a `budget.override` approval decided only by the budget's leads
(four-eyes kept), and an approved override that lets exactly one step through."""

import threading

import pytest
from django.db import connection
from django.test import Client

from approvals.models import Approval
from approvals.selectors_desk import decidable_pending
from budgets.models import BudgetOverride
from budgets.services import budget_create
from console.models import Team
from runs.models import Run, UsageDaily
from tests.support.api import ApiClient
from tests.support.budgets import admit, post_events, spend
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db
CHECK = "/api/v1/budgets/check"


def budget(tenant, **fields):
    base = {
        "name": "Support, monthly",
        "scope": {"type": "tenant", "id": None},
        "period": "month",
        "ceiling_minor_units": 1000,
    }
    return budget_create(tenant=tenant, fields={**base, **fields})


def check(api, run_id="r1", cost=0, tokens=None, status=200):
    body = {"runId": run_id, "estimatedCostMinorUnits": cost}
    if tokens is not None:
        body["estimatedTokens"] = tokens
    response = api.post(CHECK, body)
    assert response.status_code == status, response.content
    return response.json()


def decide(api, approval_id, decision="approve", **extra):
    return api.post(f"/api/v1/approvals/{approval_id}/decision", {"decision": decision, **extra})


@pytest.fixture
def lena(tenant_a):
    return PrincipalFactory(tenant=tenant_a, external_id="lena", role="lead")


@pytest.fixture
def lena_decides(client, tenant_a, lena):
    return ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=lena))


@pytest.fixture
def alice(tenant_a):
    return PrincipalFactory(tenant=tenant_a, external_id="alice")


def test_within_every_budget_the_check_allows(ingest_a, tenant_a, alice):
    admit(ingest_a, "r1")
    assert check(ingest_a, cost=50) == {
        "allowed": True,
        "budgets": [],
        "trippedBudget": None,
        "approvalId": None,
        "overrideApprovalId": None,
    }


def test_the_run_limit_comes_first_and_is_named_when_tripped(ingest_a, tenant_a, alice):
    budget(tenant_a)
    admit(ingest_a, "r1", limits={"costCeilingMinorUnits": 500})
    spend(ingest_a, "r1", usage=(4000, 5000, 420))
    allowed = check(ingest_a, cost=80)
    assert allowed["allowed"] is True
    refused = check(ingest_a, cost=81, tokens=7)
    limit = {
        "id": None,
        "name": "run limit",
        "scope": {"type": "run", "id": "r1"},
        "period": None,
        "ceilingMinorUnits": 500,
        "spentMinorUnits": 420,
        "remainingMinorUnits": 80,
        "ceilingTokens": None,
        "spentTokens": 9000,
        "allowed": False,
    }
    assert refused["budgets"][0] == limit
    assert refused["trippedBudget"] == limit
    assert refused["allowed"] is False and refused["approvalId"] is None
    assert refused["budgets"][1]["name"] == "Support, monthly"
    assert refused["budgets"][1]["allowed"] is True


def test_budgets_are_listed_narrowest_first_and_the_first_over_is_tripped(
    ingest_a, tenant_a, alice
):
    alice.teams.add(Team.objects.create(tenant=tenant_a, name="support"))
    budget(tenant_a, name="tenant", ceiling_minor_units=100)
    budget(tenant_a, name="team", scope={"type": "team", "id": "support"}, ceiling_minor_units=50)
    budget(
        tenant_a,
        name="alice",
        scope={"type": "principal", "id": "alice"},
        ceiling_minor_units=10_000,
        period="day",
        ceiling_tokens=100,
    )
    budget(
        tenant_a,
        name="bot",
        scope={"type": "agent", "id": "support-bot"},
        ceiling_minor_units=10_000,
        period="week",
    )
    admit(ingest_a, "r1", principal="alice")
    spend(ingest_a, "r1", usage=(10, 10, 40))
    answer = check(ingest_a, cost=5)
    rows = [(b["name"], b["scope"]["type"], b["period"], b["allowed"]) for b in answer["budgets"]]
    assert rows == [
        ("bot", "agent", "week", True),
        ("alice", "principal", "day", True),
        ("team", "team", "month", True),
        ("tenant", "tenant", "month", True),
    ]
    team = answer["budgets"][2]
    assert (team["spentMinorUnits"], team["remainingMinorUnits"], team["spentTokens"]) == (
        40,
        10,
        20,
    )
    answer = check(ingest_a, cost=11)
    assert answer["allowed"] is False
    assert answer["trippedBudget"]["name"] == "team"
    assert answer["trippedBudget"]["id"].startswith("bdg_")
    # Tokens: 20 spent + 81 estimated is over alice's 100-token ceiling.
    answer = check(ingest_a, cost=0, tokens=81)
    assert answer["trippedBudget"]["name"] == "alice"
    assert answer["trippedBudget"]["ceilingTokens"] == 100


def test_the_check_spends_nothing(ingest_a, tenant_a, alice):
    budget(tenant_a)
    admit(ingest_a, "r1")
    for _ in range(3):
        check(ingest_a, cost=400)
    assert not UsageDaily.objects.exists()
    assert Run.objects.get(external_id="r1").cost_minor_units == 0
    assert check(ingest_a, cost=1000)["allowed"] is True


def test_a_refuse_budget_refuses_without_asking(ingest_a, tenant_a, alice):
    budget(tenant_a, ceiling_minor_units=100)
    admit(ingest_a, "r1")
    answer = check(ingest_a, cost=101)
    assert answer["allowed"] is False and answer["approvalId"] is None
    assert not Approval.objects.exists()
    assert Run.objects.get(external_id="r1").status == "running"


# --- bad requests ---


def test_unknown_run_404_finished_run_409(ingest_a, ingest_b, tenant_a, alice):
    check(ingest_a, "nope", status=404)
    admit(ingest_b, "theirs", principal="bob")
    body = check(ingest_a, "theirs", status=404)
    assert body["error"]["code"] == "run_not_found"
    admit(ingest_a, "r1")
    post_events(ingest_a, "r1", [{"seq": 1, "type": "run.finished", "status": "done"}])
    body = check(ingest_a, "r1", status=409)
    assert body["error"]["code"] == "run_finished"
    assert body["error"]["details"] == {"status": "done"}


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"runId": "r1", "estimatedCostMinorUnits": -1}, "estimatedCostMinorUnits"),
        ({"runId": "r1", "estimatedCostMinorUnits": "5"}, "estimatedCostMinorUnits"),
        ({"runId": "r1", "estimatedCostMinorUnits": 5.5}, "estimatedCostMinorUnits"),
        ({"runId": "r1", "estimatedCostMinorUnits": 2**63}, "estimatedCostMinorUnits"),
        ({"runId": "r1", "estimatedCostMinorUnits": True}, "estimatedCostMinorUnits"),
        ({"runId": "r1"}, "estimatedCostMinorUnits"),
        ({"runId": "r1", "estimatedCostMinorUnits": 1, "estimatedTokens": -3}, "estimatedTokens"),
        ({"runId": "r1", "estimatedCostMinorUnits": 1, "estimatedTokens": None}, "estimatedTokens"),
        ({"runId": "r1", "estimatedCostMinorUnits": 1, "extra": 1}, "extra"),
        ({"runId": 7, "estimatedCostMinorUnits": 1}, "runId"),
        ({"estimatedCostMinorUnits": 1}, "runId"),
    ],
)
def test_an_invalid_body_is_a_422_naming_the_field(ingest_a, tenant_a, alice, body, path):
    admit(ingest_a, "r1")
    response = ingest_a.post(CHECK, body)
    assert response.status_code == 422, response.content
    assert path in [d["path"] for d in response.json()["error"]["details"]]


def test_not_json_or_not_an_object_is_a_422(ingest_a):
    assert ingest_a.post(CHECK, raw="{nope").status_code == 422
    assert ingest_a.post(CHECK, [1, 2]).status_code == 422
    nan = '{"runId": "r1", "estimatedCostMinorUnits": NaN}'
    assert ingest_a.post(CHECK, raw=nan).status_code == 422


def test_an_unknown_run_is_404_even_with_a_bad_estimate(ingest_a):
    response = ingest_a.post(CHECK, {"runId": "nope", "estimatedCostMinorUnits": -5})
    assert response.status_code == 404


def test_the_check_needs_an_ingest_key(client, tenant_a, lead_a):
    assert ApiClient(client, None).post(CHECK, {}).status_code == 401
    manage = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    response = manage.post(CHECK, {"runId": "r1", "estimatedCostMinorUnits": 1})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_scope"


def test_the_common_check_is_a_handful_of_queries(
    ingest_a, tenant_a, alice, django_assert_max_num_queries
):
    alice.teams.add(Team.objects.create(tenant=tenant_a, name="support"))
    for n in range(6):
        budget(
            tenant_a,
            name=f"b{n}",
            scope=[{"type": "tenant", "id": None}, {"type": "team", "id": "support"}][n % 2],
        )
    admit(ingest_a, "r1", principal="alice", limits={"costCeilingMinorUnits": 10_000})
    check(ingest_a, cost=1)  # the key's last use is written once a minute
    # key, run, budgets, spend; and the service's SAVEPOINT and its RELEASE (the request and
    # its answer are one transaction: console/api.py)
    with django_assert_max_num_queries(6):
        assert len(check(ingest_a, cost=1)["budgets"]) == 7


# --- over budget, on request: ask a lead ---


@pytest.fixture
def over(ingest_a, tenant_a, alice, lena):
    """An `ask` budget led by lena, 900 of 1000 spent by alice's run r1."""
    b = budget(tenant_a, over_budget="ask", leads=["lena"])
    admit(ingest_a, "r1", principal="alice")
    spend(ingest_a, "r1", usage=(1, 1, 900))
    return b


def test_over_an_ask_budget_the_check_asks_for_an_override(ingest_a, over):
    answer = check(ingest_a, cost=200)
    assert answer["allowed"] is False
    assert answer["trippedBudget"]["id"] == over.public_id
    approval = Approval.objects.get(public_id=answer["approvalId"])
    assert approval.tool_name == "budget.override"
    assert approval.status == "pending"
    assert approval.arguments == {
        "budgetId": over.public_id,
        "budgetName": "Support, monthly",
        "estimatedCostMinorUnits": 200,
        "spentMinorUnits": 900,
        "ceilingMinorUnits": 1000,
    }
    assert "Support, monthly" in approval.reason
    # Money as people read it, in the tenant's currency (USD), never "minor units".
    assert "$9.00 spent" in approval.reason and "$2.00 more" in approval.reason
    assert "ceiling of $10.00" in approval.reason and "minor units" not in approval.reason
    assert "Support, monthly" in approval.rejection_message
    run = ingest_a.get("/api/v1/runs/r1").json()
    assert run["status"] == "awaiting_approval"
    assert [c["id"] for c in run["pendingCalls"]] == [answer["approvalId"]]
    # Pending: the same approval again, nothing new asked.
    again = check(ingest_a, cost=300)
    assert again["approvalId"] == answer["approvalId"] and again["allowed"] is False
    assert Approval.objects.count() == 1 == BudgetOverride.objects.count()
    # Within budget, nothing is asked.
    assert check(ingest_a, cost=100)["allowed"] is True


def test_the_runtime_waits_for_the_override_with_the_decisions_long_poll(
    ingest_a, lena_decides, over
):
    approval_id = check(ingest_a, cost=200)["approvalId"]
    assert decide(lena_decides, approval_id).status_code == 200
    answer = ingest_a.get("/api/v1/runs/r1/decisions", wait="0").json()
    assert [d["approvalId"] for d in answer["decisions"]] == [approval_id]
    assert answer["decisions"][0]["decision"] == "approved"


def test_only_the_budgets_leads_decide_its_overrides(
    client, tenant_a, ingest_a, lena_decides, reviewer_a, lead_a, over
):
    approval_id = check(ingest_a, cost=200)["approvalId"]
    approval = Approval.objects.get(public_id=approval_id)
    reviewer = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
    other_lead = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=lead_a))
    for api in (reviewer, other_lead):
        response = decide(api, approval_id)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "may_not_decide"
        assert "leads of the budget 'Support, monthly'" in response.json()["error"]["message"]
    # Reviewers are not shown it as something they may decide.
    assert approval not in decidable_pending(viewer=reviewer_a)
    assert approval not in decidable_pending(viewer=lead_a)
    lena = over.leads.get()
    assert approval in decidable_pending(viewer=lena)
    assert decide(lena_decides, approval_id).status_code == 200


def test_without_leads_manage_budgets_holders_decide(
    client, tenant_a, ingest_a, alice, lead_a, reviewer_a
):
    budget(tenant_a, over_budget="ask", ceiling_minor_units=10)
    admit(ingest_a, "r1", principal="alice")
    approval_id = check(ingest_a, cost=11)["approvalId"]
    reviewer = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
    response = decide(reviewer, approval_id)
    assert response.status_code == 403 and "manage_budgets" in response.json()["error"]["message"]
    lead = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=lead_a))
    assert decide(lead, approval_id).status_code == 200


def test_no_one_decides_an_override_for_their_own_run(client, tenant_a, ingest_a, lena, over):
    tenant_a.allow_self_approval = True  # four-eyes holds for overrides all the same
    tenant_a.save()
    admit(ingest_a, "lenas", principal="lena")
    approval_id = check(ingest_a, "lenas", cost=200)["approvalId"]
    response = decide(
        ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=lena)), approval_id
    )
    assert response.status_code == 403
    assert "for themselves" in response.json()["error"]["message"]


def test_an_approved_override_lets_one_step_through(ingest_a, lena_decides, over):
    approval_id = check(ingest_a, cost=200)["approvalId"]
    assert decide(lena_decides, approval_id).status_code == 200
    bigger = check(ingest_a, cost=201)  # more than approved: asks anew
    assert bigger["allowed"] is False and bigger["approvalId"] not in (None, approval_id)
    decide(lena_decides, bigger["approvalId"], "deny")
    allowed = check(ingest_a, cost=150)
    assert allowed["allowed"] is True
    assert allowed["overrideApprovalId"] == approval_id
    assert allowed["trippedBudget"] is None and allowed["approvalId"] is None
    assert allowed["budgets"][0]["allowed"] is True
    assert allowed["budgets"][0]["spentMinorUnits"] == 900
    assert BudgetOverride.objects.get(approval__public_id=approval_id).used_at is not None
    # Used up: the next over-budget check asks again.
    after = check(ingest_a, cost=150)
    assert after["allowed"] is False and after["overrideApprovalId"] is None
    assert after["approvalId"] not in (None, approval_id)


def test_a_denied_override_asks_again_next_time(ingest_a, lena_decides, over):
    approval_id = check(ingest_a, cost=200)["approvalId"]
    assert decide(lena_decides, approval_id, "deny").status_code == 200
    decisions = ingest_a.get("/api/v1/runs/r1/decisions").json()
    assert decisions["decisions"][0]["decision"] == "denied"
    assert "Support, monthly" in decisions["decisions"][0]["message"]
    again = check(ingest_a, cost=200)
    assert again["allowed"] is False
    assert again["approvalId"] not in (None, approval_id)
    assert again["overrideApprovalId"] is None


def test_a_lead_may_approve_a_different_amount(ingest_a, lena_decides, over):
    approval_id = check(ingest_a, cost=200)["approvalId"]
    approval = Approval.objects.get(public_id=approval_id)
    edited = {**approval.arguments, "estimatedCostMinorUnits": 120}
    assert decide(lena_decides, approval_id, arguments=edited).status_code == 200
    assert check(ingest_a, cost=121)["allowed"] is False
    Approval.objects.filter(status="pending").delete()
    assert check(ingest_a, cost=120)["overrideApprovalId"] == approval_id


def test_the_run_limit_is_never_overridden(ingest_a, tenant_a, alice, lena):
    budget(tenant_a, over_budget="ask", leads=["lena"], ceiling_minor_units=100)
    admit(ingest_a, "r1", principal="alice", limits={"costCeilingMinorUnits": 100})
    answer = check(ingest_a, cost=101)
    assert answer["trippedBudget"]["name"] == "run limit"
    assert answer["approvalId"] is None and not Approval.objects.exists()


def test_a_runtime_cannot_forge_an_override(client, tenant_a, ingest_a, alice, lena_decides):
    admit(ingest_a, "r1", principal="alice")
    post_events(
        ingest_a,
        "r1",
        [
            {
                "seq": 1,
                "type": "approval.requested",
                "step": 1,
                "calls": [
                    {
                        "toolCallId": "c1",
                        "toolName": "budget.override",
                        "arguments": {},
                        "reason": "",
                        "rejectionMessage": "no",
                    }
                ],
            }
        ],
    )
    approval = Approval.objects.get()
    response = decide(lena_decides, approval.public_id)
    assert response.status_code == 403
    assert "no budget check asked for it" in response.json()["error"]["message"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_checks_use_a_grant_once(tenant_a, request):
    if connection.settings_dict["OPTIONS"].get("pool"):
        pool = connection.pool
        request.addfinalizer(lambda sizes=(pool.min_size, pool.max_size): pool.resize(*sizes))
        pool.resize(min_size=pool.min_size, max_size=pool.max_size + 8)
    PrincipalFactory(tenant=tenant_a, external_id="alice")
    lena = PrincipalFactory(tenant=tenant_a, external_id="lena", role="lead")
    budget(tenant_a, over_budget="ask", leads=["lena"], ceiling_minor_units=10)
    key = make_key(tenant_a, scopes=("ingest",))
    runtime = ApiClient(Client(), key)
    admit(runtime, "r1", principal="alice")
    approval_id = check(runtime, cost=50)["approvalId"]
    lead = ApiClient(Client(), make_key(tenant_a, scopes=("decide",), principal=lena))
    assert decide(lead, approval_id).status_code == 200
    barrier = threading.Barrier(4, timeout=60)
    answers, errors = [], []

    def checker():
        try:
            barrier.wait()
            answers.append(check(ApiClient(Client(), key), cost=50))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=checker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sorted(a["allowed"] for a in answers) == [False, False, False, True]
    assert [a["overrideApprovalId"] for a in answers if a["allowed"]] == [approval_id]
    # The three others asked anew: one new override, pending, answered to all three.
    asked = {a["approvalId"] for a in answers if not a["allowed"]}
    assert len(asked) == 1 and approval_id not in asked


def test_no_lasting_rule_decides_an_override(ingest_a, tenant_a, lead_a, over):
    from approvals.services.rules import rule_create

    for effect in ("approve", "deny"):
        rule_create(
            tenant=tenant_a,
            fields={"name": f"everything: {effect}", "effect": effect, "tool_pattern": "*"},
            principal=lead_a,
        )
    answer = check(ingest_a, cost=200)
    approval = Approval.objects.get(public_id=answer["approvalId"])
    assert approval.status == "pending" and approval.decided_by_rule is None
    assert answer["allowed"] is False


def test_nul_in_the_run_id_is_a_422_naming_it_not_a_500(ingest_a):
    """The body is parsed by the operation itself (404 before 422): it refuses U+0000 too."""
    response = ingest_a.post(CHECK, {"runId": "r\x00", "estimatedCostMinorUnits": 1})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["details"] == [
        {"path": "runId", "message": "U+0000 (NUL) is not allowed in a string"}
    ]
