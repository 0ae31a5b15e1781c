"""A tour of every page, as each persona, at 390 px and 1440 px: no horizontal overflow
(`scrollWidth <= innerWidth`), axe-core (the npm package pinned in tests/browser/node, injected
into the page) finds nothing critical or serious, in light and in dark mode, and keyboard focus
is visible. `make screenshots` runs the `screenshots` test, which writes every page as
docs/screenshots/<page>-<width>-<light|dark>.png.

The card page `/approvals/<id>/` is another branch's (the reviewer's desk) and is not toured
here; the inbox is toured as it is."""

import json
import os
import re
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.support.browser import (
    ARGS,
    CHROMIUM,
    OpenRequests,
    demo_runs,
    navigation_hung,
    screenshot,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "tests" / "browser" / "node" / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = (390, 1440)
# WCAG 2.2 A and AA (axe's tags), plus its best practices.
AXE_RUN = """() => axe.run(document, {
  runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa",
                                   "best-practice"]},
  resultTypes: ["violations"],
}).then(r => r.violations
  .filter(v => v.impact === "critical" || v.impact === "serious")
  .map(v => ({id: v.id, impact: v.impact,
              nodes: v.nodes.slice(0, 3)
                .map(n => n.target.join(" ") + ": " + n.failureSummary)})))"""
PASSWORD = {
    "admin": "admin-pass-123",
    "lead": "lead-pass-123",
    "reviewer": "reviewer-pass-123",
    "viewer": "viewer-pass-123",
}


@pytest.fixture
def tour(tenant_a, admin_a, lead_a, reviewer_a, viewer_a):
    """Something on every page: runs (some awaiting approval), a rich run, a budget led by the
    lead and already past a threshold, a team, a webhook-free tenant, notifications."""
    from budgets.services import budget_create
    from console.models import Team
    from notifications.services import notify

    runs = demo_runs(tenant_a, n=12)
    team = Team.objects.create(tenant=tenant_a, name="support")
    lead_a.teams.add(team)
    reviewer_a.teams.add(team)
    team.leads.add(lead_a)
    budget = budget_create(
        tenant=tenant_a,
        fields={
            "name": "Support, monthly",
            "scope": {"type": "tenant", "id": None},
            "period": "month",
            "ceiling_minor_units": 2000,
            "thresholds": [50, 80, 100],
            "over_budget": "ask",
            "leads": [lead_a.external_id],
        },
    )
    for who in (admin_a, lead_a, reviewer_a, viewer_a):
        notify(
            tenant=tenant_a,
            kind="budget.threshold_crossed",
            recipients=[who],
            title="Support, monthly: 80% of the ceiling reached",
            body="Spend this period is $16.00 of $20.00 (80% threshold).",
            url=f"/budgets/{budget.public_id}/",
        )
    from gateway.models import McpServer

    McpServer.objects.create(  # an upstream, never asked: no page of the tour fetches it
        tenant=tenant_a,
        name="workspace",
        url="https://mcp.example.com/mcp",
        header_names=["Authorization"],
        pass_read_only=True,
    )
    from approvals.services.saved_views import saved_view_create

    for who in (admin_a, lead_a, reviewer_a, viewer_a):  # the desk with a saved view or two
        saved_view_create(viewer=who, name="Overdue mail", filters={"view": "overdue"})
        saved_view_create(viewer=who, name="SQL analyst", filters={"agent": "sql-analyst"})
    return {
        "run": runs[2].external_id,  # awaiting approval
        "other_run": runs[3].external_id,  # failed
        "budget": budget.public_id,
        "principal": reviewer_a.external_id,
        "now": timezone.now(),
    }


def pages_for(role: str, ids: dict) -> list[str]:
    """Every page the persona reaches from the navigation, and a refused one."""
    common = ["/notifications/", "/settings/", "/accounts/password_change/", "/no-such-page/"]
    runs = ["/runs/", f"/runs/{ids['run']}/", f"/runs/{ids['other_run']}/"]
    budgets = ["/budgets/", f"/budgets/{ids['budget']}/"]
    if role == "admin":
        return [
            "/approvals/",
            "/approvals/?view=overdue",  # a saved view's page: its link current, its forms
            "/approvals/stats/",
            *runs,
            *budgets,
            "/budgets/new/",
            f"/budgets/{ids['budget']}/edit/",
            "/rules/",
            "/rules/new/",
            "/manage/principals/",
            f"/manage/principals/{ids['principal']}/",
            "/manage/principals/new/",
            "/manage/roles/",
            "/manage/roles/new/",
            "/manage/roles/reviewer/",
            "/manage/teams/",
            "/manage/teams/new/",
            "/manage/teams/support/",
            "/manage/keys/",
            "/manage/webhooks/",
            "/manage/mcp/",
            "/manage/mcp/workspace/",
            "/manage/audit/",
            "/manage/settings/",
            "/manage/settings/sso/",
            *common,
        ]
    if role == "lead":
        return ["/approvals/", *runs, *budgets, "/manage/keys/", *common]
    if role == "reviewer":
        return ["/approvals/", *runs, "/budgets/", "/rules/", *common]
    return [*runs, "/approvals/", *common]


def _name(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.strip("/").lower()) or "home"


def _browser():
    from playwright.sync_api import sync_playwright

    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `make browser-deps` (npm ci in tests/browser/node)")
    return sync_playwright()


def _sign_in(page, base: str, login: str, password: str, requests: OpenRequests) -> None:
    """Signs in and waits for the answer's redirect to commit, not for the landing page's
    load event: every page of the tour is then loaded (to network idle) by `_check`."""
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Email", exact=True).fill(login)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    try:
        page.wait_for_url(lambda url: "/accounts/login/" not in url, wait_until="commit")
    except PlaywrightTimeout as error:
        raise navigation_hung(
            f"the sign-in did not leave {page.url} (a refused password stays there)", requests
        ) from error


def _check(
    page, url: str, width: int, problems: list, axe_source: str, requests: OpenRequests
) -> None:
    """Two CI runs (of ca0a706 and e46a221, both the lead's tour) once timed out on a page's
    load event (20 s; never reproduced here): a timeout names the requests still open and
    where the live server's threads are."""
    try:
        page.goto(url)
        page.wait_for_load_state("networkidle")
    except PlaywrightTimeout as error:
        raise navigation_hung(f"{url} did not load (still at {page.url})", requests) from error
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    if scroll > inner:
        problems.append(f"{url} at {width}px: scrollWidth {scroll} > innerWidth {inner}")
    # What a disclosure holds is checked too (the desk's saved views' forms, confirmations).
    page.evaluate("() => document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    page.add_script_tag(content=axe_source)
    for violation in page.evaluate(AXE_RUN):
        problems.append(f"{url} at {width}px: {json.dumps(violation)}")


def _tour(live_server, role: str, login: str, paths: list[str], schemes=("light",)) -> list[str]:
    axe_source = AXE.read_text()
    problems: list[str] = []
    with _browser() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        for scheme in schemes:
            for width in WIDTHS:
                context = browser.new_context(
                    viewport={"width": width, "height": 900},
                    color_scheme=scheme,
                    bypass_csp=True,  # axe is injected as an inline script
                )
                page = context.new_page()
                page.set_default_timeout(20_000)
                requests = OpenRequests(page)
                _sign_in(page, live_server.url, login, PASSWORD[role], requests)
                for path in paths:
                    _check(page, f"{live_server.url}{path}", width, problems, axe_source, requests)
                context.close()
        browser.close()
    return problems


@pytest.mark.parametrize("role", ["admin", "lead", "reviewer", "viewer"])
def test_every_page_fits_390_px_and_axe_finds_nothing_serious(role, tour, live_server):
    login = f"{role}@a.example"
    problems = _tour(live_server, role, login, pages_for(role, tour))
    assert problems == [], "\n".join(problems)


def test_dark_mode_pages_meet_contrast_too(tour, live_server):
    paths = ["/approvals/", f"/runs/{tour['run']}/", f"/budgets/{tour['budget']}/", "/manage/keys/"]
    problems = _tour(live_server, "admin", "admin@a.example", paths, schemes=("dark",))
    assert problems == [], "\n".join(problems)


def test_signed_out_pages(tour, live_server):
    axe_source = AXE.read_text()
    problems: list[str] = []
    with _browser() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        for width in WIDTHS:
            context = browser.new_context(viewport={"width": width, "height": 900}, bypass_csp=True)
            page = context.new_page()
            requests = OpenRequests(page)
            for path in ("/accounts/login/", "/accounts/password_reset/"):
                _check(page, f"{live_server.url}{path}", width, problems, axe_source, requests)
            # Not stretched: the sign-in form is one narrow column at desktop width.
            page.goto(f"{live_server.url}/accounts/login/")
            form_width = page.locator("form.box").first.bounding_box()["width"]
            assert form_width <= 480, f"the sign-in form is {form_width}px wide at {width}px"
            context.close()
        browser.close()
    assert problems == [], "\n".join(problems)


def test_keyboard_focus_is_visible_and_the_menu_opens_from_the_keyboard(tour, live_server):
    with _browser() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        context = browser.new_context(viewport={"width": 390, "height": 844})
        page = context.new_page()
        _sign_in(page, live_server.url, "admin@a.example", PASSWORD["admin"], OpenRequests(page))
        page.goto(f"{live_server.url}/runs/")
        menu = page.locator("#nav-menu")
        assert not menu.is_visible()  # collapsed at 390 px: one row, not three
        header_height = page.locator(".site-header").bounding_box()["height"]
        assert header_height < 80, header_height
        page.keyboard.press("Tab")  # the skip link
        page.keyboard.press("Tab")  # the brand
        page.keyboard.press("Tab")  # the menu button
        focused = page.evaluate("document.activeElement.className")
        assert "nav-toggle" in focused
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert outline not in ("none", "")  # focus is visible
        page.keyboard.press("Enter")
        assert menu.is_visible()
        assert page.get_by_role("link", name="Budgets").is_visible()
        page.keyboard.press("Escape")
        assert not menu.is_visible()
        context.close()
        browser.close()


@pytest.mark.skipif(
    not os.environ.get("GAVEL_SCREENSHOTS"), reason="make screenshots (GAVEL_SCREENSHOTS=dir)"
)
def test_screenshots(tour, live_server):
    """Every page, both widths, light and dark, as the admin (and signed out)."""
    out = ROOT / os.environ["GAVEL_SCREENSHOTS"]
    out.mkdir(parents=True, exist_ok=True)
    with _browser() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        for scheme in ("light", "dark"):
            for width in WIDTHS:
                context = browser.new_context(
                    viewport={"width": width, "height": 900}, color_scheme=scheme
                )
                page = context.new_page()
                page.set_default_timeout(20_000)
                for path in ("/accounts/login/", "/accounts/password_reset/"):
                    page.goto(f"{live_server.url}{path}")
                    screenshot(page, out / f"{_name(path)}-{width}-{scheme}.png", full_page=False)
                _sign_in(
                    page, live_server.url, "admin@a.example", PASSWORD["admin"], OpenRequests(page)
                )
                for path in pages_for("admin", tour):
                    page.goto(f"{live_server.url}{path}")  # before `path` is renamed below
                    page.wait_for_load_state("networkidle")
                    for key in ("budget", "run", "other_run", "principal"):
                        path_named = path.replace(tour[key], key.replace("_", "-"))
                        path = path_named
                    name = _name(path)
                    screenshot(page, out / f"{name}-{width}-{scheme}.png")
                context.close()
        browser.close()
