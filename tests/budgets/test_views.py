"""/budgets/ and /budgets/<budgetId>/ over HTTP: who may see them (403 without view_budgets,
404 for another tenant's budget), the burn charts' numbers against the API's, the range
picker, the CSVs against the API's, and the create / edit forms (validated like the API,
through its services, audited)."""

import io
import json
import re
from datetime import date, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Sum
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from budgets import rules
from budgets.models import Budget, BudgetAlert
from budgets.services import budget_create
from console.models import AuditEvent, Role, Team, Tenant
from runs.models import UsageDaily
from runs.services.writes import _usage_daily_add
from tests.support.budgets import admit, post_events, spend, step
from tests.support.factories import PrincipalFactory

pytestmark = pytest.mark.django_db


def browser(principal) -> Client:
    client = Client()
    client.force_login(principal.user)
    return client


@pytest.fixture
def lead(lead_a):
    return browser(lead_a)


@pytest.fixture
def team(tenant_a, lead_a):
    support = Team.objects.create(tenant=tenant_a, name="support")
    lead_a.teams.add(support)
    return support


@pytest.fixture
def budget(tenant_a, team):
    return budget_create(
        tenant=tenant_a,
        fields={
            "name": "Support, monthly",
            "scope": {"type": "team", "id": "support"},
            "period": "month",
            "ceiling_minor_units": 5000,
            "thresholds": [50, 100],
        },
    )


@pytest.fixture
def other_budget(tenant_b):
    return budget_create(
        tenant=tenant_b,
        fields={
            "name": "B's",
            "scope": {"type": "tenant", "id": None},
            "period": "week",
            "ceiling_minor_units": 100,
        },
    )


def usage(tenant, *, day, principal="lead@a.example", agent="support-bot", model="m", cost=100):
    """One step's usage, added to the rollups as ingest adds it (both tables)."""
    key = (day, principal, agent, model)
    _usage_daily_add(tenant_id=tenant.pk, rows={key: (cost * 10, cost, cost, 1)})


def today(tenant) -> date:
    return rules.local_today(timezone.now(), rules.zone(tenant.time_zone))


def chart(html: str, data_id: str) -> dict:
    match = re.search(
        rf'<script id="{re.escape(data_id)}" type="application/json">(.*?)</script>', html
    )
    assert match, f"no chart data {data_id}"
    return json.loads(match.group(1))


def budget_only_principal(tenant, *, capabilities=("view_budgets",)):
    principal = PrincipalFactory(tenant=tenant, role=None, password="only-pass-123")
    role = Role.objects.create(tenant=tenant, name="budgets-only", capabilities=list(capabilities))
    principal.roles.add(role)
    return principal


# --- who may see what ---


def test_a_viewer_without_view_budgets_gets_403_pages(viewer_a, budget):
    client = browser(viewer_a)
    for path in (
        "/budgets/",
        f"/budgets/{budget.public_id}/",
        "/budgets/usage.csv",
        "/budgets/partials/budget-list/",
        f"/budgets/{budget.public_id}/burn.csv",
        "/budgets/new/",
    ):
        response = client.get(path)
        assert response.status_code == 403, path
    page = client.get("/budgets/").content.decode()
    assert "You may not open this page" in page  # plain words, not the capability's name
    assert "view_budgets" not in page and "capability" not in page and "HTTP 403" not in page
    assert 'href="/budgets/"' not in client.get("/runs/").content.decode()  # not in the nav


def test_another_tenants_budget_is_404_like_a_missing_one(lead, other_budget):
    for path in (
        f"/budgets/{other_budget.public_id}/",
        f"/budgets/{other_budget.public_id}/edit/",
        f"/budgets/{other_budget.public_id}/burn.csv",
        f"/budgets/{other_budget.public_id}/partials/budget-alerts/",
        "/budgets/bdg_nope/",
    ):
        assert lead.get(path).status_code == 404, path
    assert lead.post(f"/budgets/{other_budget.public_id}/delete/").status_code == 404
    assert other_budget.public_id not in lead.get("/budgets/").content.decode()


def test_view_budgets_alone_sees_the_pages_but_no_forms(tenant_a, budget):
    client = browser(budget_only_principal(tenant_a))
    html = client.get("/budgets/").content.decode()
    assert budget.name in html and 'href="/budgets/new/"' not in html
    assert "Edit budget" not in client.get(f"/budgets/{budget.public_id}/").content.decode()
    assert client.get("/budgets/new/").status_code == 403
    assert client.get(f"/budgets/{budget.public_id}/edit/").status_code == 403
    assert client.post("/budgets/new/", {"name": "x"}).status_code == 403
    assert client.post(f"/budgets/{budget.public_id}/delete/").status_code == 403
    assert Budget.objects.filter(tenant=tenant_a).count() == 1


# --- the burn chart and its table ---


def test_the_burn_chart_and_table_show_the_apis_current_spend(
    tenant_a, lead, budget, manage_a, lead_a, alice
):
    now = today(tenant_a)
    first = now.replace(day=1)
    usage(tenant_a, day=first, cost=700)
    usage(tenant_a, day=now, cost=1100, model="m2")
    usage(tenant_a, day=now, principal="alice", cost=999)  # alice is in no team: not in scope
    usage(tenant_a, day=first - timedelta(days=1), cost=5000)  # last month
    start = rules.period_bounds("month", timezone.now(), rules.zone("UTC"))[0]
    BudgetAlert.objects.create(
        budget=budget, period_start=start, threshold=50, spent_minor_units=2600
    )
    api = manage_a.get(f"/api/v1/budgets/{budget.public_id}").json()["current"]
    assert api["spentMinorUnits"] == 1800
    html = lead.get(f"/budgets/{budget.public_id}/").content.decode()
    data = chart(html, f"burn-{budget.public_id}-data")
    assert data["kind"] == "burn"
    assert data["spent"][0]["y"] == 0 and data["spent"][-1]["y"] == api["spentMinorUnits"]
    assert data["spent"][-1]["v"] == "$18.00"
    # the projection moves with the clock between the two reads
    assert data["projection"][0]["y"] == 1800
    assert data["projection"][1]["y"] == pytest.approx(api["projectedMinorUnits"], rel=0.01)
    assert [p["y"] for p in data["ceiling"]] == [5000, 5000]
    assert [t["percent"] for t in data["thresholds"]] == [50]  # 100% is the ceiling line
    assert data["thresholds"][0]["crossed"] is False and len(data["alerts"]) == 1
    assert data["x"]["max"] == (rules.period_days("month", now)[1] - first).days
    cells = re.findall(r'<td class="num" data-minor="(\d+)">', html)
    assert "1800" in cells  # cumulative today
    assert "$18.00" in html and "$50.00" in html and "36.0%" in html
    assert "<canvas data-chart=" in html and 'role="img"' in html


def test_the_index_lists_every_active_budget_with_its_chart(tenant_a, lead, budget):
    archived = budget_create(
        tenant=tenant_a,
        fields={
            "name": "Old",
            "scope": {"type": "tenant", "id": None},
            "period": "day",
            "ceiling_minor_units": 10,
        },
    )
    archived.archived_at = timezone.now()
    archived.save()
    html = lead.get("/budgets/").content.decode()
    assert f'id="budget-{budget.public_id}"' in html
    assert archived.public_id not in html
    assert chart(html, f"burn-{budget.public_id}-data")["kind"] == "burn"
    assert 'src="/static/vendor/chartjs/chart.umd.min.js"' in html
    assert "vendor/chartjs" not in lead.get("/runs/").content.decode()  # only on budgets pages


def test_the_index_runs_as_many_queries_for_6_budgets_as_for_2(
    tenant_a, lead, team, django_assert_max_num_queries
):
    def make(n):
        for i in range(n):
            budget_create(
                tenant=tenant_a,
                fields={
                    "name": f"b{n}-{i}",
                    "scope": {"type": ("tenant", "team")[i % 2], "id": (None, "support")[i % 2]},
                    "period": ("day", "week", "month")[i % 3],
                    "ceiling_minor_units": 100,
                },
            )

    make(2)
    with CaptureQueriesContext(connection) as two:
        assert lead.get("/budgets/").status_code == 200
    make(4)
    with django_assert_max_num_queries(len(two.captured_queries)):
        assert lead.get("/budgets/").content.decode().count('class="budget-card') == 6


# --- breakdowns and the range picker ---


def test_breakdowns_match_the_usage_api_for_the_range(tenant_a, lead, manage_a, team):
    now = today(tenant_a)
    for n in range(40):
        usage(tenant_a, day=now - timedelta(days=n), principal=f"p{n % 3}", cost=10 + n)
    first = now - timedelta(days=29)
    html = lead.get(f"/budgets/?from={first}&to={now}").content.decode()
    for dimension in ("principal", "agent", "model", "team", "day"):
        api = manage_a.get(
            "/api/v1/usage", **{"from": str(first), "to": str(now), "groupBy": dimension}
        ).json()
        data = chart(html, f"usage-{dimension}-data")
        section = html.split(f'id="usage-{dimension}"')[1].split("</section>")[0]
        cells = [int(v) for v in re.findall(r'<td class="num" data-minor="(-?\d+)">', section)]
        rows = api["rows"]
        if dimension == "day":
            rows = sorted(rows, key=lambda r: r["day"])
            assert sum(data["values"]) == api["totals"]["costMinorUnits"]
            assert len(data["values"]) == 30  # every day of the range, zero where none
        else:
            assert data["values"] == [r["costMinorUnits"] for r in rows]
        assert cells == [r["costMinorUnits"] for r in rows] + [api["totals"]["costMinorUnits"]]


def test_a_breakdown_formats_only_the_rows_its_table_lists(tenant_a, lead, team, monkeypatch):
    from budgets import selectors_usage

    monkeypatch.setattr(selectors_usage, "TABLE_ROWS", 2)
    monkeypatch.setattr(selectors_usage, "BARS", 3)
    formatted = []
    row_view = selectors_usage._row_view
    monkeypatch.setattr(
        selectors_usage, "_row_view", lambda *a, **kw: formatted.append(a[0]) or row_view(*a, **kw)
    )
    now = today(tenant_a)
    for n in range(5):
        usage(tenant_a, day=now, principal=f"p{n}", cost=10 * (n + 1))
    html = lead.get(f"/budgets/?from={now}&to={now}").content.decode()
    section = html.split('id="usage-principal"')[1].split("</section>")[0]
    cells = [int(v) for v in re.findall(r'<td class="num" data-minor="(-?\d+)">', section)]
    assert cells == [50, 40, 150]  # the two costliest, then the range's total
    assert chart(html, "usage-principal-data")["values"] == [50, 40, 30, 10 + 20]  # 2 others
    assert formatted.count("principal") == 2


def test_the_range_picker_defaults_to_this_month_and_offers_presets(tenant_a, lead):
    now = today(tenant_a)
    html = lead.get("/budgets/").content.decode()
    assert f'name="from" value="{now.replace(day=1)}"' in html
    assert f'name="to" value="{now}"' in html
    assert f'href="/budgets/?from={now - timedelta(days=29)}&amp;to={now}"' in html
    assert f'href="/budgets/?from={now - timedelta(days=89)}&amp;to={now}"' in html
    assert 'aria-current="true">This month</a>' in html
    html = lead.get(f"/budgets/?from={now - timedelta(days=89)}&to={now}").content.decode()
    assert 'aria-current="true">Last 90 days</a>' in html
    assert f"/budgets/usage.csv?from={now - timedelta(days=89)}&amp;to={now}&amp;groupBy=model" in (
        html
    )
    live = re.search(r'ws-connect="([^"]+)"', html).group(1)
    assert live == f"/ws/budgets/?from={now - timedelta(days=89)}&amp;to={now}"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("from=2026-13-01", "from"),
        ("from=yesterday", "from"),
        ("to=2026-02-30", "to"),
        ("from=2026-06-01&to=2026-05-01", "from"),
        ("from=2025-01-01&to=2026-06-01", "to"),
    ],
)
def test_a_bad_range_is_a_400_naming_the_field_and_shows_no_usage(lead, budget, query, field):
    response = lead.get(f"/budgets/?{query}")
    assert response.status_code == 400
    html = response.content.decode()
    assert f"<code>{field}</code>" in html and 'role="alert"' in html
    assert 'id="usage-principal"' not in html
    assert f'id="budget-{budget.public_id}"' in html  # the budgets are still shown


def test_the_usage_csv_is_the_apis_csv(tenant_a, lead, manage_a, team):
    now = today(tenant_a)
    for n in range(12):
        usage(tenant_a, day=now - timedelta(days=n % 4), principal=f"p{n % 5}", model=f"m{n % 2}")
    for group_by in ("principal", "team", "day", "model", "day,principal", "agent"):
        query = {"from": str(now - timedelta(days=3)), "to": str(now), "groupBy": group_by}
        page = lead.get("/budgets/usage.csv", query)
        api = manage_a.get("/api/v1/usage", **query, format="csv")
        assert page.status_code == api.status_code == 200
        assert page["Content-Type"] == api["Content-Type"]
        assert page.content == api.content, group_by
        assert page["Content-Disposition"] == api["Content-Disposition"]
    bad = lead.get("/budgets/usage.csv", {"groupBy": "galaxy"})
    assert bad.status_code == 422 and "groupBy" in bad.content.decode()


def test_the_burn_csv_holds_the_tables_rows(tenant_a, lead, budget):
    now = today(tenant_a)
    usage(tenant_a, day=now, cost=250)
    response = lead.get(f"/budgets/{budget.public_id}/burn.csv")
    lines = response.content.decode().splitlines()
    assert lines[0] == "day,costMinorUnits,cumulativeMinorUnits,tokens"
    assert lines[-1] == f"{now},250,250,2750"
    assert len(lines) == 1 + now.day  # the 1st of the month to today


def test_fragments_are_the_pages_own_partials(tenant_a, lead, budget, monkeypatch):
    # One clock for every render: a card's projection is spent x period / elapsed, so a page
    # and its fragment rendered a few ms apart could round it differently (CI, 2026-12-07).
    frozen = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: frozen)
    now = today(tenant_a)
    usage(tenant_a, day=now, cost=42)
    page = lead.get("/budgets/").content.decode()
    for name in ("budget-list", "usage-summary", "usage-team"):
        fragment = lead.get(f"/budgets/partials/{name}/").content.decode().strip()
        assert f'id="{name}"' in fragment[:80]
        assert fragment in page, name
    detail = lead.get(f"/budgets/{budget.public_id}/").content.decode()
    for name in (f"budget-{budget.public_id}", "budget-alerts", "budget-overrides"):
        fragment = lead.get(f"/budgets/{budget.public_id}/partials/{name}/").content.decode()
        assert fragment.strip() in detail, name
    assert lead.get("/budgets/partials/nope/").status_code == 404


# --- the forms ---

VALID = {
    "name": "Support, weekly",
    "scope_type": "team",
    "scope_id": "support",
    "period": "week",
    "ceiling": "500.00",
    "ceiling_tokens": "",
    "thresholds": "80, 100",
    "over_budget": "ask",
    "leads": "lead@a.example",
}


def test_creating_a_budget_through_the_form_is_the_apis_create_audited(
    tenant_a, lead, lead_a, team, manage_a
):
    assert lead.get("/budgets/new/").status_code == 200
    response = lead.post("/budgets/new/", VALID)
    budget = Budget.objects.get(tenant=tenant_a, name="Support, weekly")
    assert response.status_code == 302 and response["Location"] == f"/budgets/{budget.public_id}/"
    api = manage_a.get(f"/api/v1/budgets/{budget.public_id}").json()
    assert api["ceilingMinorUnits"] == 50000 and api["scope"] == {"type": "team", "id": "support"}
    assert api["thresholds"] == [80, 100] and api["overBudget"] == "ask"
    assert api["leads"] == ["lead@a.example"] and api["ceilingTokens"] is None
    entry = AuditEvent.objects.get(tenant=tenant_a, action="budget.created")
    assert entry.actor_principal == lead_a and entry.object_id == budget.public_id
    assert entry.before is None and entry.after["ceilingMinorUnits"] == 50000


def test_editing_a_budget_through_the_form_is_audited_before_and_after(
    tenant_a, lead, lead_a, budget
):
    form = lead.get(f"/budgets/{budget.public_id}/edit/").content.decode()
    assert 'value="Support, monthly"' in form and 'value="50.00"' in form
    assert 'value="50, 100"' in form
    changed = {**VALID, "name": "Support, monthly", "period": "month", "ceiling": "75.5"}
    response = lead.post(f"/budgets/{budget.public_id}/edit/", changed)
    assert response.status_code == 302
    budget.refresh_from_db()
    assert budget.ceiling_minor_units == 7550 and budget.over_budget == "ask"
    entry = AuditEvent.objects.get(tenant=tenant_a, action="budget.updated")
    assert entry.actor_principal == lead_a
    assert entry.before["ceilingMinorUnits"] == 5000
    assert entry.after["ceilingMinorUnits"] == 7550
    lead.post(f"/budgets/{budget.public_id}/edit/", changed)  # nothing changes: no entry
    assert AuditEvent.objects.filter(tenant=tenant_a, action="budget.updated").count() == 1


def test_deleting_archives_through_the_service(tenant_a, lead, budget):
    response = lead.post(f"/budgets/{budget.public_id}/delete/")
    assert response.status_code == 302 and response["Location"] == "/budgets/"
    budget.refresh_from_db()
    assert budget.archived_at is not None
    assert AuditEvent.objects.filter(action="budget.deleted", object_id=budget.public_id).exists()
    assert "was deleted" in lead.get(f"/budgets/{budget.public_id}/").content.decode()


# Each bad form, and the API body it makes: both refused, the form naming the field.
BAD = [
    ({"name": ""}, {"name": ""}, "name"),
    ({"name": "x" * 201}, {"name": "x" * 201}, "name"),
    ({"scope_type": "galaxy"}, {"scope": {"type": "galaxy", "id": "support"}}, "scope_type"),
    ({"period": "year"}, {"period": "year"}, "period"),
    ({"ceiling": "0"}, {"ceilingMinorUnits": 0}, "ceiling"),
    ({"ceiling": ""}, {"ceilingMinorUnits": None}, "ceiling"),
    ({"thresholds": "0, 80"}, {"thresholds": [0, 80]}, "thresholds"),
    ({"thresholds": "1001"}, {"thresholds": [1001]}, "thresholds"),
    ({"over_budget": "maybe"}, {"overBudget": "maybe"}, "over_budget"),
    ({"ceiling_tokens": "0"}, {"ceilingTokens": 0}, "ceiling_tokens"),
    ({"scope_id": "nobody-team"}, {"scope": {"type": "team", "id": "nobody-team"}}, "scope_id"),
    ({"scope_type": "tenant"}, {"scope": {"type": "tenant", "id": "support"}}, "scope_id"),
    ({"leads": "lead@a.example, ghost"}, {"leads": ["lead@a.example", "ghost"]}, "leads"),
]
API_BODY = {
    "name": "Support, weekly",
    "scope": {"type": "team", "id": "support"},
    "period": "week",
    "ceilingMinorUnits": 50000,
    "thresholds": [80, 100],
    "overBudget": "ask",
    "leads": ["lead@a.example"],
}


@pytest.mark.parametrize(("form", "body", "field"), BAD)
def test_the_form_refuses_what_the_api_refuses_naming_the_field(
    tenant_a, lead, team, manage_a, form, body, field
):
    api_body = {k: v for k, v in {**API_BODY, **body}.items() if v is not None}
    assert manage_a.post("/api/v1/budgets", api_body).status_code == 422
    response = lead.post("/budgets/new/", {**VALID, **form})
    assert response.status_code == 422
    errors = response.context["form"].errors
    assert field in errors, errors
    assert 'class="help is-danger"' in response.content.decode()
    assert not Budget.objects.filter(tenant=tenant_a).exists()


def test_the_form_refuses_what_only_the_form_cannot_read(lead, team):
    for form, field in (
        ({"ceiling": "12.345"}, "ceiling"),
        ({"ceiling": "lots"}, "ceiling"),
        ({"thresholds": "80, high"}, "thresholds"),
        ({"ceiling_tokens": "1e6"}, "ceiling_tokens"),
    ):
        response = lead.post("/budgets/new/", {**VALID, **form})
        assert response.status_code == 422
        assert field in response.context["form"].errors


def test_a_name_in_use_is_shown_on_the_name_field(tenant_a, lead, budget, team):
    response = lead.post("/budgets/new/", {**VALID, "name": budget.name})
    assert response.status_code == 422
    assert "exists" in " ".join(response.context["form"].errors["name"])
    assert Budget.objects.filter(tenant=tenant_a).count() == 1


def test_forms_need_the_csrf_token(lead_a, team):
    client = Client(enforce_csrf_checks=True)
    client.force_login(lead_a.user)
    assert client.post("/budgets/new/", VALID).status_code == 403
    assert not Budget.objects.exists()


def test_alerts_and_overrides_are_listed_on_the_budget_page(
    tenant_a, lead, lead_a, ingest_a, budget
):
    admit(ingest_a, "run_over", principal="lead@a.example")
    spend(ingest_a, "run_over", usage=(10, 5, 3000))  # 60%: the 50% alert
    budget.over_budget = "ask"
    budget.save()
    check = ingest_a.post(
        "/api/v1/budgets/check", {"runId": "run_over", "estimatedCostMinorUnits": 2500}
    ).json()
    assert check["allowed"] is False and check["approvalId"]
    html = lead.get(f"/budgets/{budget.public_id}/").content.decode()
    alerts = html.split('id="budget-alerts"')[1].split("</section>")[0]
    assert "50%" in alerts and "$30.00" in alerts
    overrides = html.split('id="budget-overrides"')[1].split("</section>")[0]
    assert f'href="/runs/run_over/#approval-{check["approvalId"]}"' in overrides
    assert "pending" in overrides and "$25.00" in overrides


def test_seed_usage_writes_the_rollups_of_n_steps(db):
    call_command(
        "seed_usage", tenant="seeded", steps=500, days=10, principals=4, stdout=io.StringIO()
    )
    tenant = Tenant.objects.get(slug="seeded")
    rows = UsageDaily.objects.filter(tenant=tenant)
    assert rows.aggregate(n=Sum("steps"))["n"] == 500
    assert rows.values("day").distinct().count() <= 10 and rows.filter(principal_id="").exists()
    assert Team.objects.filter(tenant=tenant, name="support").exists()
    call_command(
        "seed_usage", tenant="seeded", steps=50, days=10, principals=4, stdout=io.StringIO()
    )
    assert rows.aggregate(n=Sum("steps"))["n"] == 50  # replaced, not added


def test_seed_usage_refuses_bad_input_and_writes_nothing(db):
    for options in (
        {"steps": 0},
        {"days": 400},
        {"time_zone": "Mars/Base"},
        {"currency": "XXQ"},
    ):
        with pytest.raises(CommandError):
            call_command("seed_usage", tenant="seeded", **{"steps": 10, **options})
    assert not Tenant.objects.filter(slug="seeded").exists()


@pytest.mark.parametrize("dimension", ["principal", "agent", "model", "team"])
def test_usage_top_is_the_reports_first_rows_in_its_order(tenant_a, lead_a, team, dimension):
    from budgets import selectors

    now = today(tenant_a)
    other = Team.objects.create(tenant=tenant_a, name="Zebra")
    PrincipalFactory(tenant=tenant_a, external_id="b@x").teams.add(other)
    for n, (principal, agent, model, cost) in enumerate(
        [
            ("b@x", "B", "m2", 30),
            ("a@x", "a", "m1", 30),
            ("", "", "", 30),
            ("Ä@x", "Ä", "m3", 5),
            ("lead@a.example", "z", "m1", 30),
            ("c@x", "c", "M", 1),
        ]
    ):
        usage(tenant_a, day=now - timedelta(days=n % 2), principal=principal, agent=agent,
              model=model, cost=cost)  # fmt: skip
    span = {"viewer": lead_a, "date_from": now - timedelta(days=3), "date_to": now}
    report = selectors.usage_report(**span, group_by=[dimension])
    for limit in (1, 3, 10):
        top = selectors.usage_top(**span, dimension=dimension, limit=limit)
        assert top["rows"] == report["rows"][:limit], limit  # ties by key, none last
        assert top["row_count"] == len(report["rows"])
        assert top["rows_cost"] == sum(r["cost_minor_units"] for r in report["rows"])
        assert top["totals"] == report["totals"]


# --- the burn chart of today, and a budget made already over ---


def test_a_budget_made_mid_day_already_over_draws_from_the_first_spend_and_lists_its_alerts(
    tenant_a, lead, ingest_a
):
    """UX audit: a budget created 155% over lit every alert pill yet said "No threshold
    reached yet", and its chart drew a straight line from midnight."""

    now = timezone.now()
    midnight = rules.period_bounds("day", now, rules.zone(tenant_a.time_zone))[0]
    at = midnight + (now - midnight) / 2  # today, before the budget is made
    admit(ingest_a, "r1")
    post_events(ingest_a, "r1", step(1, 1, usage=(1, 1, 155), at=at.isoformat()))
    made = budget_create(
        tenant=tenant_a,
        fields={
            "name": "Daily",
            "scope": {"type": "tenant", "id": None},
            "period": "day",
            "ceiling_minor_units": 100,
            "thresholds": [50, 80, 100],
        },
    )
    html = lead.get(f"/budgets/{made.public_id}/").content.decode()
    data = chart(html, f"burn-{made.public_id}-data")
    hours = (at - midnight).total_seconds() / 3600
    start, first, last = data["spent"]
    assert (start["x"], start["y"]) == (0, 0)
    assert first["x"] == pytest.approx(hours, abs=1e-3) and first["y"] == 0
    assert first["t"].startswith("First spend today (")
    assert last["y"] == 155 and last["x"] >= first["x"]
    # Every threshold it was past when made is an alert, and the panel says so.
    assert "No threshold reached yet." not in html
    alerts = html[html.index('id="budget-alerts"') : html.index('id="budget-overrides"')]
    assert alerts.count('<span class="tag is-warning is-rounded">') == 3
    assert len(data["alerts"]) == 3


def test_a_budget_with_no_spend_says_no_threshold_was_reached(tenant_a, lead):
    made = budget_create(
        tenant=tenant_a,
        fields={
            "name": "Quiet",
            "scope": {"type": "tenant", "id": None},
            "period": "day",
            "ceiling_minor_units": 100,
        },
    )
    html = lead.get(f"/budgets/{made.public_id}/").content.decode()
    assert "No threshold reached yet." in html
    assert [(p["x"] == 0, p["y"]) for p in chart(html, f"burn-{made.public_id}-data")["spent"]][
        0
    ] == (True, 0)
