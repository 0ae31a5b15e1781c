"""Cost beside every decision: approval resources carry `runCostMinorUnits` and the budgets
that apply to the run (no query per row), and every approval card shows both in the tenant's
currency."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Approval
from budgets.services import budget_create
from console.core.formatting import money
from console.directory import keycopies
from console.models import Team
from tests.support.api import ApiClient
from tests.support.budgets import admit, post_events, spend
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db


def budget(tenant, **fields):
    base = {
        "name": "Support, monthly",
        "scope": {"type": "tenant", "id": None},
        "period": "month",
        "ceiling_minor_units": 5000,
    }
    return budget_create(tenant=tenant, fields={**base, **fields})


def held(api, run_id, call_id, seq):
    post_events(
        api,
        run_id,
        [
            {
                "seq": seq,
                "type": "approval.requested",
                "step": 1,
                "calls": [
                    {
                        "toolCallId": call_id,
                        "toolName": "send_email",
                        "arguments": {"to": "bob"},
                        "reason": "mail",
                        "rejectionMessage": "no",
                    }
                ],
            }
        ],
    )


@pytest.fixture
def decide(client, tenant_a, reviewer_a):
    return ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))


@pytest.fixture
def costly(ingest_a, tenant_a, alice):
    PrincipalFactory(tenant=tenant_a, external_id="bob")
    alice.teams.add(Team.objects.create(tenant=tenant_a, name="support"))
    budget(tenant_a)
    budget(tenant_a, name="team", scope={"type": "team", "id": "support"}, ceiling_minor_units=2000)
    budget(tenant_a, name="bob's", scope={"type": "principal", "id": "bob"})
    admit(ingest_a, "r1", principal="alice")
    spend(ingest_a, "r1", usage=(1, 1, 1234))
    held(ingest_a, "r1", "c1", 3)


def test_the_approval_resource_carries_the_runs_cost_and_budgets(ingest_a, decide, costly):
    [item] = decide.get("/api/v1/approvals", status="pending").json()["items"]
    assert item["runCostMinorUnits"] == 1234
    assert item["budgets"] == [
        {
            "id": item["budgets"][0]["id"],
            "name": "team",
            "remainingMinorUnits": 766,
            "ceilingMinorUnits": 2000,
            "percent": 61.7,
        },
        {
            "id": item["budgets"][1]["id"],
            "name": "Support, monthly",
            "remainingMinorUnits": 3766,
            "ceilingMinorUnits": 5000,
            "percent": 24.68,
        },
    ]
    assert all(b["id"].startswith("bdg_") for b in item["budgets"])
    run = ingest_a.get("/api/v1/runs/r1").json()
    assert run["pendingCalls"][0]["budgets"] == item["budgets"]
    assert run["pendingCalls"][0]["runCostMinorUnits"] == 1234
    decided = decide.post(f"/api/v1/approvals/{item['id']}/decision", {"decision": "approve"})
    assert decided.json()["budgets"] == item["budgets"]
    assert decided.json()["runCostMinorUnits"] == 1234


def test_a_run_no_budget_applies_to_has_none(ingest_a, decide, tenant_a):
    admit(ingest_a, "r1", principal="carol")
    held(ingest_a, "r1", "c1", 1)
    [item] = decide.get("/api/v1/approvals").json()["items"]
    assert (item["runCostMinorUnits"], item["budgets"]) == (0, [])


def test_lists_cost_the_same_queries_for_one_approval_or_many(ingest_a, decide, tenant_a, alice):
    alice.teams.add(Team.objects.create(tenant=tenant_a, name="support"))
    budget(tenant_a)
    budget(tenant_a, name="team", scope={"type": "team", "id": "support"})

    def queries(path, api, **params):
        # Each count includes its key's read: a principal made in between (p2, p4) drops this
        # process's key copies (console/directory/keycopies.py), so only one count would.
        keycopies.forget_all()
        with CaptureQueriesContext(connection) as captured:
            assert api.get(path, **params).status_code == 200
        return len(captured)

    admit(ingest_a, "r0", principal="alice")
    held(ingest_a, "r0", "c0", 1)
    decide.get("/api/v1/approvals")  # a key's last use is written once a minute: not counted
    one = (queries("/api/v1/approvals", decide), queries("/api/v1/runs", ingest_a))
    for n in range(1, 6):
        admit(ingest_a, f"r{n}", principal="alice" if n % 2 else f"p{n}", agent=f"a{n}")
        held(ingest_a, f"r{n}", f"c{n}", 1)
    assert Approval.objects.count() == 6
    many = (queries("/api/v1/approvals", decide), queries("/api/v1/runs", ingest_a))
    assert many == one


def test_webhook_payloads_carry_the_cost_too(ingest_a, tenant_a, alice):
    from approvals.models import WebhookDelivery
    from approvals.services.webhooks import webhook_create

    webhook_create(tenant=tenant_a, url="https://hooks.example/x", events=["approval.requested"])
    budget(tenant_a)
    admit(ingest_a, "r1", principal="alice")
    spend(ingest_a, "r1", usage=(1, 1, 10))
    held(ingest_a, "r1", "c1", 3)
    payload = WebhookDelivery.objects.get().payload["approval"]
    assert payload["runCostMinorUnits"] == 10
    assert [b["remainingMinorUnits"] for b in payload["budgets"]] == [4990]


def test_the_card_shows_the_cost_and_what_is_left_in_the_tenants_currency(
    client, reviewer_a, ingest_a, costly
):
    client.login(username="reviewer@a.example", password="reviewer-pass-123")
    html = client.get("/approvals/").content.decode()
    assert "$12.34 (no ceiling)" in html
    assert "team: $7.66 left of $20.00 (61.7% spent)" in html
    assert "Support, monthly: $37.66 left of $50.00 (24.68% spent)" in html


def test_a_card_without_budgets_says_so(client, reviewer_a, ingest_a, tenant_a):
    admit(ingest_a, "r1", principal="carol")
    held(ingest_a, "r1", "c1", 1)
    client.login(username="reviewer@a.example", password="reviewer-pass-123")
    html = client.get("/approvals/").content.decode()
    assert "none apply" in html


@pytest.mark.parametrize(
    ("amount", "currency", "locale", "text"),
    [
        (1234, "USD", "en", "$12.34"),
        (-5, "USD", "en", "-$0.05"),
        (1234, "EUR", "en", "€12.34"),
        (1234, "EUR", "de", "12,34\xa0€"),
        (1234, "JPY", "en", "¥1,234"),  # no minor unit
        (1234, "KWD", "en", "KWD1.234"),  # three
        (123456789, "USD", "en", "$1,234,567.89"),
        (None, "USD", "en", "—"),
    ],
)
def test_money_formats_minor_units_by_the_currencys_digits(amount, currency, locale, text):
    assert money(amount, currency, locale) == text
