"""Playwright (sync API) driving Debian's chromium against pytest-django's live_server.

Skipped with a clear reason when /usr/bin/chromium is absent, unless GAVEL_REQUIRE_BROWSER=1
(CI), where a missing browser fails. Sync Playwright runs an event loop in this thread, so a
test makes its database rows BEFORE it asks for `page` (the ORM refuses to run beside a loop).
Screenshots go to build/screenshots/.
"""

import os

import pytest

from tests.support.browser import (
    ARGS,
    CHROMIUM,
    demo_run_page,
    demo_runs,
)


def pytest_collection_modifyitems(config, items):
    if os.path.exists(CHROMIUM) or os.environ.get("GAVEL_REQUIRE_BROWSER") == "1":
        return
    skip = pytest.mark.skip(
        reason=f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)"
    )
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(skip)


@pytest.fixture
def browser_context():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"GAVEL_REQUIRE_BROWSER=1 but {CHROMIUM} is missing")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        yield context
        context.close()
        browser.close()


@pytest.fixture
def page(browser_context, live_server):
    page = browser_context.new_page()
    page.set_default_timeout(10_000)
    page.base_url = live_server.url
    yield page
    page.close()


@pytest.fixture
def list_runs(tenant_a):
    return demo_runs(tenant_a)


@pytest.fixture
def few_runs(tenant_a):
    return demo_runs(tenant_a, n=3)


@pytest.fixture
def rich_run(tenant_a):
    return demo_run_page(tenant_a)
