"""/budgets/ and /budgets/<budgetId>/ in Chromium against a real daphne (ports 8600-8699): the
charts are drawn, the tables hold the numbers GET /api/v1/usage answers, a step finished through
the API shows without a reload, a viewer gets 403 and another tenant's budget 404.

The console is provisioned once for the module the way an operator would: 90 days of usage
(`seed_usage`), budgets (`create_budget`), logins; then usage, an alert and over-budget
overrides through the API, as runtimes and leads make them. Screenshots: build/screenshots/
(docs/screenshots/budgets.png and budget-detail.png are copies of these).
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import date, timedelta

import httpx
import pytest

from tests.support.browser import shot, sign_in
from tests.support.docs import _docs_copy
from tests.support.live_console import LiveConsole, last_line, manage

pytestmark = pytest.mark.browser
TENANT, OTHER = "acme", "globex"
LEAD, LEAD_PASSWORD = "lena", "lena-pass-123"
VIEWER, VIEWER_PASSWORD = "victor", "victor-pass-123"
BUDGETS = [  # name, scope, period, ceiling (minor units), thresholds, over budget
    ("Whole tenant, monthly", "tenant", "month", "70000", "50,80,100", "refuse"),
    ("Support team, weekly", "team:support", "week", "5000", "80,100", "ask"),
    ("Alice, daily", "principal:alice@example.com", "day", "1500", "80,100", "refuse"),
    ("Research agent, monthly", "agent:research-agent", "month", "800", "80,100", "ask"),
]


class BudgetsConsole(LiveConsole):
    TENANT = TENANT

    def provision(self) -> None:
        env = self.env
        manage(env, "migrate", "--verbosity", "0")
        manage(env, "create_tenant", TENANT, "--name", "Acme Support")
        manage(env, "seed_usage", "--tenant", TENANT, "--steps", "30000", "--days", "90",
               "--time-zone", "Europe/Berlin")  # fmt: skip
        manage(env, "create_principal", "--tenant", TENANT, LEAD, "--name", "Lena Okafor",
               "--password", LEAD_PASSWORD, "--role", "lead", "--team", "support")  # fmt: skip
        manage(env, "create_principal", "--tenant", TENANT, VIEWER, "--name", "Victor Hale",
               "--password", VIEWER_PASSWORD, "--role", "viewer")  # fmt: skip
        self.budget_ids = {}
        for name, scope, period, ceiling, thresholds, over in BUDGETS:
            out = manage(env, "create_budget", "--tenant", TENANT, "--name", name, "--scope",
                         scope, "--period", period, "--ceiling", ceiling, "--thresholds",
                         thresholds, "--over-budget", over, "--lead", LEAD)  # fmt: skip
            self.budget_ids[name] = last_line(out)
        manage(env, "create_tenant", OTHER)
        out = manage(env, "create_budget", "--tenant", OTHER, "--name", "Globex", "--scope",
                     "tenant", "--period", "week", "--ceiling", "100")  # fmt: skip
        self.other_budget = last_line(out)
        self.ingest_key = last_line(manage(env, "create_api_key", "--tenant", TENANT,
                                           "--name", "runtime"))  # fmt: skip
        self.decide_key = last_line(manage(env, "create_api_key", "--tenant", TENANT, "--name",
                                           "lena's bot", "--scope", "decide", "--principal",
                                           LEAD))  # fmt: skip

    @contextlib.contextmanager
    def lead_session(self):
        """An httpx client signed in as the lead (the API takes a browser session)."""
        with httpx.Client(base_url=self.url, timeout=10) as client:
            token = client.get("/accounts/login/").cookies["csrftoken"]
            client.post(
                "/accounts/login/",
                data={"username": LEAD, "password": LEAD_PASSWORD, "csrfmiddlewaretoken": token},
            )
            yield client


def finished_step(seq: int, number: int, cost: int, model: str = "model-large") -> list[dict]:
    usage = {"inputTokens": 2000, "outputTokens": 400, "costMinorUnits": cost}
    return [
        {"seq": seq, "type": "step.started", "step": number, "agentId": "support-bot",
         "model": model},
        {"seq": seq + 1, "type": "step.finished", "step": number, "model": model,
         "usage": usage, "finishReason": "stop"},
    ]  # fmt: skip


def admit(api: httpx.Client, run_id: str, principal: str) -> None:
    body = {"id": run_id, "agentId": "support-bot", "agentVersion": 3, "principalId": principal}
    assert api.post("/api/v1/runs", json=body).status_code in (200, 201)


def history(console: BudgetsConsole) -> None:
    """What runtimes and a lead do: usage that reaches the support budget's 80%, two checks
    over it that ask (one approved by the lead and used, one still pending)."""
    with console.api(console.ingest_key) as api, console.api(console.decide_key) as lead:
        admit(api, "run_support_1042", "ivan@example.com")
        admit(api, "run_support_1043", "erin@example.com")
        with console.lead_session() as browser:
            budget_id = console.budget_ids["Support team, weekly"]
            spent = browser.get(f"/api/v1/budgets/{budget_id}").json()["current"]["spentMinorUnits"]
        to_80 = max(1, 4000 - spent + 150)
        posted = api.post("/api/v1/runs/run_support_1042/events",
                          json={"events": finished_step(1, 1, to_80)})  # fmt: skip
        assert posted.status_code == 200, posted.text
        for run_id, estimate in (("run_support_1042", 1800), ("run_support_1043", 2400)):
            check = api.post(
                "/api/v1/budgets/check", json={"runId": run_id, "estimatedCostMinorUnits": estimate}
            ).json()
            assert check["approvalId"], check  # fmt: skip
            if run_id == "run_support_1042":
                decided = lead.post(f"/api/v1/approvals/{check['approvalId']}/decision",
                                    json={"decision": "approve"})  # fmt: skip
                assert decided.status_code == 200, decided.text
                again = api.post(
                    "/api/v1/budgets/check", json={"runId": run_id, "estimatedCostMinorUnits": 1800}
                ).json()
                assert again["allowed"] and again["overrideApprovalId"]  # fmt: skip


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    live = BudgetsConsole(tmp_path_factory.mktemp("budgets-browser"), db_suffix="bpbrowser")
    live.provision()
    live.start()
    history(live)
    yield live
    live.stop()


def open_page(browser_context, console, path: str, user=LEAD, password=LEAD_PASSWORD):
    page = browser_context.new_page()
    page.set_default_timeout(10_000)
    page.base_url = console.url
    sign_in(page, user, password, next_path=path.split("?")[0])
    if "?" in path:
        page.goto(f"{console.url}{path}")
    return page


CHARTS_DRAWN = """() => {
  const canvases = Array.from(document.querySelectorAll('canvas[data-chart]'));
  return canvases.length > 0 && canvases.every((canvas) => {
    const chart = window.Chart && Chart.getChart(canvas);
    return chart && chart.data.datasets.length > 0
      && chart.data.datasets.every((d) => d.data.length > 0);
  });
}"""

INKED = """(selector) => {
  const canvas = document.querySelector(selector);
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let inked = 0;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) inked += 1;
  return inked;
}"""


def _rows(page, dimension: str) -> list[tuple[str, int]]:
    rows = page.locator(f"#usage-{dimension} tbody tr[data-key]").evaluate_all(
        "rows => rows.map(r => [r.dataset.key, Number(r.querySelector('td[data-minor]')"
        ".dataset.minor)])"
    )
    return [tuple(row) for row in rows]


def _api(page, path: str) -> dict:
    response = page.request.get(f"{page.base_url}{path}")
    assert response.ok, response.text()
    return response.json()


def test_the_budgets_page_draws_every_chart_and_its_tables_match_the_api(browser_context, console):
    with console.lead_session() as browser:
        today = date.fromisoformat(browser.get("/api/v1/usage").json()["to"])  # tenant-local
    first = today - timedelta(days=89)
    page = open_page(browser_context, console, f"/budgets/?from={first}&to={today}")
    page.wait_for_function(CHARTS_DRAWN)
    page.locator("#live-status[data-state=live]").wait_for()
    page.wait_for_timeout(600)  # the first draw's animation
    for budget_id in console.budget_ids.values():
        assert page.evaluate(INKED, f'canvas[data-chart="burn-{budget_id}-data"]') > 2000
    assert page.evaluate(INKED, 'canvas[data-chart="usage-principal-data"]') > 2000
    query = f"from={first}&to={today}"
    for dimension, key in (("principal", "principalId"), ("agent", "agentId"),
                           ("model", "model"), ("team", "team")):  # fmt: skip
        api = _api(page, f"/api/v1/usage?{query}&groupBy={dimension}")
        expected = [(row[key] or "", row["costMinorUnits"]) for row in api["rows"]]
        assert _rows(page, dimension) == expected, dimension
    listed = _api(page, "/api/v1/budgets")["items"]
    cards = page.locator("[data-budget-id]").evaluate_all(
        "cards => cards.map(c => [c.dataset.budgetId, "
        "Number(c.querySelector('.budget-spent').dataset.minor)])"
    )
    assert cards == [[b["id"], b["current"]["spentMinorUnits"]] for b in listed]
    total = _api(page, f"/api/v1/usage?{query}&groupBy=day")["totals"]["costMinorUnits"]
    assert int(page.locator("#usage-summary [data-minor]").get_attribute("data-minor")) == total
    assert page.locator("#usage-summary").inner_text().count("$") >= 2
    _docs_copy(shot(page, "budgets"), "budgets.png")
    page.close()


def test_a_finished_step_shows_on_the_budgets_page_without_a_reload(browser_context, console):
    page = open_page(browser_context, console, "/budgets/")
    page.wait_for_function(CHARTS_DRAWN)
    page.locator("#live-status[data-state=live]").wait_for()
    page.evaluate("window.__noReload = true")
    tenant_card = f"#budget-{console.budget_ids['Whole tenant, monthly']}"
    before = int(page.locator(f"{tenant_card} .budget-spent").get_attribute("data-minor"))
    carol_before = dict(_rows(page, "principal")).get("carol@example.com", 0)
    with console.api(console.ingest_key) as api:
        admit(api, "run_live_carol", "carol@example.com")
        posted = api.post("/api/v1/runs/run_live_carol/events",
                          json={"events": finished_step(1, 1, 1234)})  # fmt: skip
        assert posted.status_code == 200
    started = time.monotonic()
    page.wait_for_function(
        "([sel, value]) => Number(document.querySelector(sel).dataset.minor) === value",
        arg=[f"{tenant_card} .budget-spent", before + 1234],
        timeout=5_000,
    )
    elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"the spend showed {elapsed * 1000:.0f} ms after the POST"
    assert dict(_rows(page, "principal"))["carol@example.com"] == carol_before + 1234
    page.wait_for_function(CHARTS_DRAWN)  # redrawn after the swap
    spent_line = page.evaluate(
        "(sel) => { const c = Chart.getChart(document.querySelector(sel));"
        " const d = c.data.datasets[0].data; return d[d.length - 1].y; }",
        f"{tenant_card} canvas[data-chart]",
    )
    assert spent_line == before + 1234
    assert page.evaluate("window.__noReload === true")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    page.close()


def test_the_budget_page_shows_its_chart_alerts_and_overrides(browser_context, console):
    budget_id = console.budget_ids["Support team, weekly"]
    page = open_page(browser_context, console, f"/budgets/{budget_id}/")
    page.wait_for_function(CHARTS_DRAWN)
    page.wait_for_timeout(600)
    assert page.evaluate(INKED, "canvas[data-chart]") > 2000
    alerts = page.locator("#budget-alerts")
    assert "80%" in alerts.inner_text()
    overrides = page.locator("#budget-overrides tbody tr")
    assert overrides.count() == 2
    assert (
        "approved" in overrides.nth(1).inner_text() and "pending" in overrides.nth(0).inner_text()
    )
    link = overrides.nth(1).get_by_role("link", name="run_support_1042")
    assert link.get_attribute("href").startswith("/runs/run_support_1042/#approval-apr_")
    table = json.loads(page.locator(f"#burn-{budget_id}-data").text_content())
    assert table["kind"] == "burn" and table["ceiling"][0]["v"] == "$50.00"
    assert page.get_by_role("link", name="Edit budget").is_visible()
    _docs_copy(shot(page, "budget-detail"), "budget-detail.png")
    page.close()


def test_a_viewer_gets_403_and_no_budgets_link(browser_context, console):
    page = open_page(browser_context, console, "/runs/", user=VIEWER, password=VIEWER_PASSWORD)
    assert page.locator("nav").get_by_role("link", name="Budgets").count() == 0
    response = page.goto(f"{console.url}/budgets/")
    assert response.status == 403
    assert "You may not open this page" in page.locator("main").inner_text()  # plain words
    page.close()


def test_another_tenants_budget_is_404(browser_context, console):
    page = open_page(browser_context, console, "/budgets/")
    response = page.goto(f"{console.url}/budgets/{console.other_budget}/")
    assert response.status == 404
    assert page.get_by_role("heading", name="Not found").is_visible()
    page.close()
