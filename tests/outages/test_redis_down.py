"""Redis (the channel layer of two daphne processes) stopped: ingest and decisions keep
working through either process, an inbox open in a real browser says "reconnecting…", and
once Redis is back the page has caught up (what was ingested meanwhile is on it) within 2 s,
then follows live again across the processes. Redis is a redis-server of the test's own."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from tests.support.browser import CHROMIUM, sign_in
from tests.support.daphne import daphne, hold
from tests.support.live_console import LiveConsole
from tests.support.processes import RedisServer

pytestmark = [pytest.mark.postgres, pytest.mark.browser, pytest.mark.outage]

PASSWORD = "reviewer-pass-123"
CATCH_UP = 2.0  # seconds from Redis answering again to the missed call on the page


@pytest.fixture
def redis():
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def browser(tmp_path):
    if not os.path.exists(CHROMIUM) and os.environ.get("GAVEL_REQUIRE_BROWSER") != "1":
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from tests.support.browser import ARGS

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        context = chromium.new_context(viewport={"width": 1400, "height": 900})
        yield context
        context.close()
        chromium.close()


def _card(page, tool: str):
    return page.locator("#desk-rows li.desk-row", has_text=tool)  # the desk's rows


def _status(page) -> str:
    return page.locator("#live-status").get_attribute("data-state") or ""


def test_redis_stopped_ingest_and_decisions_work_pages_reconnect_and_catch_up(
    redis, browser, tmp_path
):
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL: two processes share one database")
    console = LiveConsole(tmp_path, db_suffix="redisdown")
    console.provision(password=PASSWORD)
    env = {**console.env, "REDIS_URL": redis.url, "REDIS_PREFIX": "gavel-outage-redis"}
    with (
        daphne(env, tmp_path / "a.log") as url_a,
        daphne(env, tmp_path / "b.log") as url_b,
        httpx.Client(base_url=url_b, headers={"Authorization": f"Bearer {console.ingest_key}"},
                     timeout=10) as runtime_b,
        httpx.Client(base_url=url_a, headers={"Authorization": f"Bearer {console.ingest_key}"},
                     timeout=40) as runtime_a,
        httpx.Client(base_url=url_b, headers={"Authorization": f"Bearer {console.decide_key}"},
                     timeout=10) as reviewer_b,
    ):  # fmt: skip
        page = browser.new_page()
        page.set_default_timeout(10_000)
        page.base_url = url_a
        sign_in(page, console.REVIEWER, PASSWORD, next_path="/approvals/")
        page.locator("#live-status[data-state=live]").wait_for()
        assert hold(runtime_b, "run_before", "email.before")["pending"] == ["c1"]
        _card(page, "email.before").wait_for(timeout=3_000)  # live through Redis: B → A

        redis.stop()
        page.locator("#live-status[data-state=reconnecting]").wait_for(timeout=10_000)
        assert "reconnecting" in page.locator("#live-status").inner_text()

        started = time.monotonic()  # ingest through B, decide through B, the poll on A
        assert hold(runtime_b, "run_during", "email.during")["pending"] == ["c1"]
        pending = reviewer_b.get("/api/v1/approvals", params={"status": "pending"})
        before = next(a for a in pending.json()["items"] if a["runId"] == "run_before")
        decided = reviewer_b.post(f"/api/v1/approvals/{before['id']}/decision",
                                  json={"decision": "approve"})  # fmt: skip
        assert decided.status_code == 200, decided.text
        polled = runtime_a.get("/api/v1/runs/run_before/decisions", params={"wait": "10"})
        assert polled.status_code == 200
        assert [d["decision"] for d in polled.json()["decisions"]] == ["approved"]
        meanwhile = time.monotonic() - started
        assert meanwhile < 5, f"ingest, decision and poll took {meanwhile:.1f} s without Redis"
        time.sleep(1)
        assert _card(page, "email.during").count() == 0  # nothing live reaches the page now
        assert _status(page) == "reconnecting"

        redis.start()
        back = time.monotonic()
        _card(page, "email.during").wait_for(timeout=10_000)
        caught_up = time.monotonic() - back
        page.locator("#live-status[data-state=live]").wait_for(timeout=1_000)
        assert caught_up < CATCH_UP, f"the page caught up {caught_up:.2f} s after Redis came back"
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload

        assert hold(runtime_b, "run_after", "email.after")["pending"] == ["c1"]
        _card(page, "email.after").wait_for(timeout=3_000)  # live across the processes again
        print(f"caught up {caught_up:.2f} s after Redis came back; ingest, decision and "
              f"long-poll during the outage took {meanwhile:.2f} s")  # fmt: skip
        page.close()
