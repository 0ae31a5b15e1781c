"""`/api/v1/docs` in a real browser (issue 18, item 6): Swagger UI renders the operations list
from our own origin under the production CSP, with no CSP violation, no request to another
origin, and "Try it out" reaching the API (a key-less call answers the contract's 401).
Screenshots: build/screenshots/api-docs*.png; with GAVEL_DOCS_SCREENSHOTS=1 also
docs/screenshots/api-docs.png."""

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from console.middleware import CSP
from tests.support.browser import shot
from tests.support.docs import _docs_copy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every violation the page meets, as the browser reports it (CSP never blocks this init script:
# Playwright injects it outside the page's policy).
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


def test_swagger_ui_renders_the_operations_under_the_csp(browser_context, live_server):
    page = browser_context.new_page()
    page.set_default_timeout(15_000)
    page.add_init_script(RECORD_VIOLATIONS)
    messages, requests, errors = [], [], []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))

    docs = page.goto(f"{live_server.url}/api/v1/docs")
    assert docs.status == 200
    assert docs.headers["content-security-policy"] == CSP
    # Swagger UI draws once it has fetched and read the whole schema (225 KB): the page's
    # 15 s, not expect's default 5 s (a CI run under load once took longer than 5 s).
    expect(page.locator(".opblock").first).to_be_visible(timeout=15_000)
    assert page.locator(".opblock").count() >= 20
    runs = page.locator(".opblock-get", has=page.locator('[data-path="/api/v1/runs"]')).first
    expect(runs).to_be_visible()
    _docs_copy(shot(page, "api-docs", full_page=False), "api-docs.png")

    runs.locator(".opblock-summary").click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    answer = page.locator(".live-responses-table tr.response .response-col_status").first
    expect(answer).to_contain_text("401")  # the request reached the API (connect-src 'self')
    shot(page, "api-docs-try-it-out", full_page=False)

    assert page.evaluate("window.__cspViolations") == []
    assert not [m for m in messages if "Content Security Policy" in m], messages
    # the one expected error line is the browser's note on the key-less call's 401
    unexpected = [m for m in messages if m.startswith("error") and "status of 401" not in m]
    assert unexpected == [], messages
    assert errors == []
    ours = urlsplit(live_server.url).netloc
    assert {urlsplit(url).netloc for url in requests} == {ours}, requests
    page.close()
