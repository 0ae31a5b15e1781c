"""The reviewer's inbox in a real browser: deciding, the JSON editor (invalid JSON never
leaves the browser), the message the model reads, keyboard, masked values, the loser of a
race, and a runtime's long-poll woken by a click (against a live daphne on PostgreSQL+Redis).

Rows are made before `page` is asked for (the ORM refuses to run beside Playwright's loop);
afterwards the test speaks only HTTP: the browser, and the runtime's API through page.request.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.browser import ARGS, CHROMIUM, shot, sign_in
from tests.support.factories import ApprovalFactory, RunFactory, make_key
from tests.support.workers import free_port

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def held(tenant_a, reviewer_a, lead_a):
    run = RunFactory(
        tenant=tenant_a,
        external_id="run_inbox_1",
        role_ids=["editor"],
        limits={"costCeilingMinorUnits": 500},
        cost_minor_units=150,
    )
    approval = ApprovalFactory(
        run=run,
        step=2,
        tool_call_id="call_mail",
        arguments={"to": "bob@example.com", "api_key": "sk-live-abcdefghijklmnop"},
        rejection_message="The user declined to send this email.",
    )
    return {
        "run": run,
        "approval": approval,
        "ingest": make_key(tenant_a, scopes=("ingest",)),
        "lead": make_key(tenant_a, scopes=("decide",), principal=lead_a),
    }


def read_decisions(page, key, run_id="run_inbox_1", **params):
    response = page.request.get(
        f"{page.base_url}/api/v1/runs/{run_id}/decisions",
        params=params,
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.ok, response.text()
    return response.json()


def card(page, approval):
    return page.locator(f"#approval-{approval.public_id}")


def test_invalid_json_never_leaves_the_browser_and_edited_arguments_reach_the_runtime(held, page):
    approval = held["approval"]
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    posts = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    the_card = card(page, approval)
    the_card.get_by_text("Approve with edited arguments").click()
    editor = the_card.get_by_label("Arguments (JSON)")
    editor.fill('{"to": "carol@example.com",')
    the_card.get_by_role("button", name="Approve").click()
    error = the_card.locator(".json-error")
    error.wait_for(state="visible")
    assert error.inner_text().startswith("Not valid JSON")
    page.wait_for_timeout(300)
    assert posts == []  # nothing was sent
    shot(page, "inbox-invalid-json")
    editor.fill('{"to": "carol@example.com", "subject": "Edited"}')
    assert error.is_hidden()
    with page.expect_response(lambda r: "/decision/" in r.url):
        the_card.get_by_role("button", name="Approve").click()
    the_card.locator(".decided-status").wait_for()
    assert "Approved" in the_card.inner_text()
    assert "waiting for runtime" in the_card.inner_text()
    decision = read_decisions(page, held["ingest"])["decisions"][0]
    assert decision["decision"] == "approved"
    assert decision["arguments"] == {"to": "carol@example.com", "subject": "Edited"}
    page.goto(f"{page.base_url}/approvals/{approval.public_id}/")
    assert "runtime resumed" in page.content()


def test_deny_with_an_edited_message_the_runtime_reads_exactly_that(held, page):
    approval = held["approval"]
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    the_card = card(page, approval)
    message = the_card.get_by_label("Message the model reads")
    assert message.input_value() == "The user declined to send this email."
    text = "Not Bob — ask Alice.\nPolicy 7 applies."
    message.fill(text)
    with page.expect_response(lambda r: "/decision/" in r.url):
        the_card.get_by_role("button", name="Deny").click()
    the_card.locator(".decided-status").wait_for()
    shot(page, "inbox-denied")
    assert read_decisions(page, held["ingest"])["decisions"][0]["message"] == text


def test_keyboard_j_k_e_and_d(held, tenant_a, page):
    """The desk's keys reach the runtime: E edits the message (typing there triggers nothing),
    Esc leaves it, D denies with what was typed."""
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    row = page.locator(f"#desk-row-{held['approval'].public_id}")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == f"desk-row-{held['approval'].public_id}"
    page.keyboard.press("e")
    assert page.evaluate("document.activeElement.name") == "message"
    page.keyboard.press("Control+End")
    page.keyboard.type(" Typing here does not trigger shortcuts: a d j k.")
    page.keyboard.press("Escape")
    with page.expect_response(lambda r: r.url.endswith("/api/v1/approvals/decisions")):
        page.keyboard.press("d")
    row.wait_for(state="detached")
    decision = read_decisions(page, held["ingest"])["decisions"][0]
    assert decision["decision"] == "denied"
    assert decision["message"].endswith("Typing here does not trigger shortcuts: a d j k.")


def test_masked_values_reveal_and_the_countdown_ticks(held, page):
    approval = held["approval"]
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    the_card = card(page, approval)
    secret = the_card.locator(".secret-value")
    assert secret.is_hidden() and "sk-live" not in the_card.locator(".json-view").inner_text()
    the_card.get_by_role("button", name="reveal").click()
    assert secret.is_visible() and "sk-live-abcdefghijklmnop" in secret.inner_text()
    countdown = the_card.locator(".countdown")
    first = countdown.inner_text()
    page.wait_for_timeout(1200)
    assert countdown.inner_text() != first and "m" in countdown.inner_text()
    shot(page, "inbox")


def test_the_loser_of_a_race_sees_who_decided(held, page):
    approval = held["approval"]
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    won = page.request.post(
        f"{page.base_url}/api/v1/approvals/{approval.public_id}/decision",
        data=json.dumps({"decision": "approve"}),
        headers={"Authorization": f"Bearer {held['lead']}", "Content-Type": "application/json"},
    )
    assert won.status == 200
    with page.expect_response(lambda r: "/decision/" in r.url):
        card(page, approval).get_by_role("button", name="Deny").click()
    card(page, approval).locator(".approval-notice").wait_for()
    assert "Already approved by lead@a.example." in card(page, approval).inner_text()
    assert card(page, approval).get_by_role("button", name="Deny").count() == 0


def test_a_viewer_sees_no_controls(held, viewer_a, page):
    sign_in(page, "viewer@a.example", "viewer-pass-123", next_path="/approvals/")
    the_card = card(page, held["approval"])
    assert the_card.is_visible()
    assert the_card.get_by_role("button", name="Approve").count() == 0
    assert the_card.get_by_label("Message the model reads").count() == 0


# ---- a live daphne on PostgreSQL + Redis: the click wakes the runtime's long-poll ----------


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def daphne_url():
    from django.db import connection

    if connection.vendor != "postgresql" or not os.environ.get("REDIS_URL"):
        pytest.skip("needs PostgreSQL (DATABASE_URL) and Redis (REDIS_URL) for a live daphne")
    # This worker's own slice of the range: two workers starting a daphne at the same moment
    # must not pick one port (the second daphne fails to bind, and its test would talk to the
    # first's, on another worker's database).
    port = free_port(range(8440, 8460))
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_PREFIX": f"{os.environ.get('REDIS_PREFIX', 'gavel')}-daphne-{port}",
        "SECRET_KEY": "test-daphne",
        "DEBUG": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
    }
    daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        [*daphne, "console.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while _free(port):
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("daphne did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.postgres
def test_a_browser_decision_wakes_the_runtime_long_poll_within_100ms(held, daphne_url):
    """The reviewer clicks Deny; the runtime's held poll (on the same live daphne, through the
    Redis layer) answers within 100 ms of the decision's response reaching the browser (both
    instants on this machine's wall clock: the browser's own response timing, and the poll's
    return). The decision's commit comes before its response, so this bounds commit → wake
    from above by 100 ms plus the view's post-commit rendering."""
    import httpx
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    approval = held["approval"]
    result = {}

    def runtime():
        with httpx.Client(base_url=daphne_url, timeout=20) as client:
            headers = {"Authorization": f"Bearer {held['ingest']}"}
            client.get("/api/v1/runs/run_inbox_1/decisions", params={"wait": 0}, headers=headers)
            result["started"] = True
            response = client.get(
                "/api/v1/runs/run_inbox_1/decisions", params={"wait": 15}, headers=headers
            )
            result["returned_at"] = time.time()
            result["body"] = response.json()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page()
        page.base_url = daphne_url
        sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
        poller = threading.Thread(target=runtime)
        poller.start()
        while "started" not in result:
            time.sleep(0.02)
        time.sleep(0.5)  # the poll is held now
        the_card = card(page, approval)
        the_card.get_by_label("Message the model reads").fill("Denied from the browser.")
        with page.expect_response(lambda r: "/decision/" in r.url) as decided:
            the_card.get_by_role("button", name="Deny").click()
        timing = decided.value.request.timing
        answered_at = (timing["startTime"] + timing["responseStart"]) / 1000
        poller.join(20)
        try:
            the_card.locator(".decided-status").wait_for()
        except PlaywrightTimeout as exc:  # say what the page had (an intermittent failure)
            answer = decided.value
            raise AssertionError(
                f"no decided status on the card; the decision's answer: {answer.status} "
                f"{answer.text()[:300]!r}; the pane: "
                f"{page.locator('#desk-pane').inner_html()[:1500]!r}; the desk said: "
                f"{page.locator('#desk-status').inner_text()!r}"
            ) from exc
        browser.close()
    decision = result["body"]["decisions"][0]
    assert decision["message"] == "Denied from the browser."
    decided_at = datetime.fromisoformat(decision["decidedAt"].replace("Z", "+00:00"))
    latency = result["returned_at"] - answered_at
    since_start = result["returned_at"] - decided_at.timestamp()
    assert latency < 0.1, (
        f"the long-poll returned {latency * 1000:.0f} ms after the decision's response "
        f"({since_start * 1000:.0f} ms after the deciding transaction began)"
    )


@pytest.mark.postgres
def test_a_card_rendered_before_the_decision_never_replaces_the_decided_one(held, daphne_url):
    """Frames of different events render concurrently and may arrive out of order: a card
    re-rendered while the call was still pending (another reviewer extended it, say) can reach
    the page after the card that shows the decision. Sent through the socket after the
    decision, it is dropped: the card keeps saying Denied, with no buttons to decide it again,
    and it stays in the pane through every later frame (the list is empty by then)."""
    import re

    from playwright.sync_api import sync_playwright

    approval = held["approval"]
    sockets = []

    def route(ws):
        ws.connect_to_server()  # everything passes both ways, as without the route
        sockets.append(ws)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page()
        page.set_default_timeout(15_000)
        page.base_url = daphne_url
        page.route_web_socket(re.compile(r"/ws/inbox/"), route)
        sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
        page.locator("#live-status[data-state=live]").wait_for()
        the_card = card(page, approval)
        stale = the_card.evaluate("card => card.outerHTML")  # the pending card, as rendered
        assert 'data-status="pending"' in stale
        the_card.get_by_label("Message the model reads").fill("Not this one.")
        the_card.get_by_role("button", name="Deny").click()
        the_card.locator(".decided-status").wait_for()
        page.locator(f"#desk-row-{approval.public_id}").wait_for(state="detached")
        page.locator("#desk-count[data-count='0']").wait_for()  # the decision's own frame
        decided = the_card.evaluate("card => card.outerHTML")
        # The stale card arrives now, then the decided card again (as the runtime's pickup
        # re-renders it), then a count: once the count is in, both cards were handled.
        sockets[0].send(stale)
        sockets[0].send(decided)
        sockets[0].send(
            '<span id="desk-count" data-count="7" data-at="99999999999999999">7 to decide</span>'
        )
        page.locator("#desk-count[data-count='7']").wait_for()
        assert the_card.get_attribute("data-status") == "denied"
        assert the_card.locator(".decided-status").inner_text() == "Denied"
        assert the_card.get_by_role("button", name="Deny").count() == 0
        browser.close()
