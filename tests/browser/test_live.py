"""Live pages in a real browser against real daphne processes (ports 8500-8599).

1. One daphne (the embedded default: SQLite file, in-process channel layer; PostgreSQL when
   DATABASE_URL says so): the run page shows a step posted through the API within 1 s.
2. Two daphne processes sharing one PostgreSQL database and one Redis: a browser on B sees a
   step and a held call ingested through A, without reloading.
"""

from __future__ import annotations

import os
import secrets
import time

import pytest

from tests.support.browser import sign_in
from tests.support.browser_live import (
    HELD,
    PASSWORD,
    REVIEWER,
    RUN,
    STEP,
    admit,
    daphne,
    post,
    provision,
    runtime,
)
from tests.support.live_console import live_env


def open_run_page(browser_context, url: str):
    page = browser_context.new_page()
    page.set_default_timeout(10_000)
    page.base_url = url
    sign_in(page, REVIEWER, PASSWORD, next_path=f"/runs/{RUN}/")
    page.locator("#live-status[data-state=live]").wait_for()
    return page


@pytest.mark.browser
def test_the_run_page_shows_a_step_posted_by_the_api_within_a_second(browser_context, tmp_path):
    env = live_env(tmp_path, "h6live1")
    key = provision(env)
    with daphne(env, tmp_path / "daphne.log") as url, runtime(url, key) as api:
        admit(api)
        page = open_run_page(browser_context, url)
        assert page.locator("#step-1").count() == 0
        post(api, STEP)
        posted = time.monotonic()
        page.locator("#step-1").wait_for(timeout=5_000)
        elapsed = time.monotonic() - posted
        assert elapsed < 1.0, f"the step showed {elapsed * 1000:.0f} ms after the POST returned"
        assert "m-1" in page.locator("#step-1").inner_text()
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload
        page.close()


def _redis_env(env: dict) -> dict:
    prefix = f"{os.environ.get('REDIS_PREFIX', 'gavel')}-live-{secrets.token_hex(3)}"
    return {**env, "REDIS_URL": os.environ["REDIS_URL"], "REDIS_PREFIX": prefix}


@pytest.mark.postgres
@pytest.mark.browser
def test_a_browser_on_process_b_sees_what_process_a_ingested(browser_context, tmp_path):
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    if not os.environ.get("REDIS_URL"):
        pytest.skip("needs Redis: set REDIS_URL=redis://... (the channel layer of both processes)")
    env = _redis_env(live_env(tmp_path, "h6live2"))
    key = provision(env)
    with (
        daphne(env, tmp_path / "a.log") as url_a,
        daphne(env, tmp_path / "b.log") as url_b,
        runtime(url_a, key) as api_a,
    ):
        assert url_a != url_b
        admit(api_a)
        page = open_run_page(browser_context, url_b)
        post(api_a, STEP)
        page.locator("#step-1").wait_for(timeout=3_000)
        post(api_a, HELD)
        card = page.locator("#run-approvals article.approval-card", has_text="refund_payment")
        card.wait_for(timeout=3_000)
        assert card.get_by_role("button", name="Approve").is_visible()
        assert page.locator("#nav-pending-count").inner_text().startswith("1")
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
        page.close()
