"""The desk live both ways against a real daphne: a call held through the API appears as a row
(and its count) without a reload, and a call decided elsewhere leaves the list while the card in
the pane says who decided (and a call decided through the pane's own form is not said to be
decided elsewhere)."""

import pytest

from tests.support.browser import sign_in
from tests.support.browser_live import (
    HELD,
    PASSWORD,
    REVIEWER,
    RUN,
    STEP,
    TENANT,
    admit,
    daphne,
    post,
    provision,
    runtime,
)
from tests.support.live_console import last_line, live_env, manage

pytestmark = pytest.mark.browser


def test_the_desk_is_live_both_ways(browser_context, tmp_path):
    env = live_env(tmp_path, "desklive")
    key = provision(env)
    manage(env, "create_principal", "--tenant", TENANT, "lena@live.example", "--role", "admin")
    decide = last_line(
        manage(
            env,
            "create_api_key",
            "--tenant",
            TENANT,
            "--name",
            "lena",
            "--scope",
            "decide",
            "--principal",
            "lena@live.example",
        )  # fmt: skip
    )
    with daphne(env, tmp_path / "daphne.log") as url, runtime(url, key) as api:
        admit(api)
        page = browser_context.new_page()
        page.set_default_timeout(10_000)
        page.base_url = url
        sign_in(page, REVIEWER, PASSWORD, next_path="/approvals/")
        page.locator("#live-status[data-state=live]").wait_for()
        assert page.locator("li.desk-row").count() == 0
        post(api, STEP, HELD)
        row = page.locator("li.desk-row")
        row.wait_for(timeout=5_000)
        assert "refund_payment" in row.inner_text()
        page.locator("#desk-count[data-count='1']").wait_for(timeout=5_000)
        assert page.locator("#nav-pending-count").inner_text().split()[0] == "1"
        approval_id = row.get_attribute("data-approval-id")
        row.click()  # its card in the pane
        page.locator(f"#desk-pane #approval-{approval_id}").wait_for()
        with runtime(url, decide) as lena:
            decided = lena.post(
                f"/api/v1/approvals/{approval_id}/decision", json={"decision": "approve"}
            )
            assert decided.status_code == 200, decided.text
        row.wait_for(state="detached", timeout=5_000)
        page.locator("#desk-count[data-count='0']").wait_for(timeout=5_000)
        card = page.locator(f"#desk-pane #approval-{approval_id}")
        card.locator(".decided-status").wait_for(timeout=5_000)
        assert "Approved" in card.inner_text() and "lena@live.example" in card.inner_text()
        status = page.locator("#desk-status")
        assert "approved by" in status.inner_text() and "elsewhere" in status.inner_text()
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert RUN in card.inner_text()

        # A call this reviewer decides through the pane's own form was decided here.
        post(
            api,
            {**STEP, "seq": 3, "step": 2},
            {
                **HELD,
                "seq": 4,
                "step": 2,
                "calls": [{"toolCallId": "call_form", "toolName": "send_email", "arguments": {}}],
            },
        )
        row.wait_for(timeout=5_000)
        assert "send_email" in row.inner_text()
        second = row.get_attribute("data-approval-id")
        row.click()
        form_card = page.locator(f"#desk-pane #approval-{second}")
        form_card.locator("button.decide-deny").click()
        form_card.locator(".decided-status").wait_for(timeout=5_000)
        row.wait_for(state="detached", timeout=5_000)
        page.wait_for_function(
            "document.getElementById('desk-status').textContent.startsWith('send_email')"
        )
        said = status.inner_text()
        assert said.startswith("send_email: denied by "), said
        assert "elsewhere" not in said, said
        page.close()
