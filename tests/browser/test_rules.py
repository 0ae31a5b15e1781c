"""Rules in a real browser: "Always approve calls like this" on a card opens the editor
prefilled from the call, its live preview follows the edits, saving makes the rule, and the
next identical call never reaches the inbox while the runtime's long-poll gets `approved` at
once. Also the rules list, analytics and a decided-by-rule card, as screenshots.

Rows are made before `page` is asked for (the ORM refuses to run beside Playwright's loop);
afterwards the test speaks only HTTP: the browser, and the runtime's API through page.request.
"""

import os
import shutil
import time
from pathlib import Path

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from tests.support.browser import shot, sign_in
from tests.support.factories import ApprovalFactory, RunFactory, make_key

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
ARGS = {"to": "bob@acme.com", "subject": "Weekly report"}


def keep(path: Path, name: str) -> None:
    """Screenshots go to build/screenshots/; with GAVEL_DOCS_SCREENSHOTS=1 they also refresh
    the docs' copies (docs/screenshots/rules-*.png), so a test run leaves the tree clean."""
    if os.environ.get("GAVEL_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS / f"rules-{name}.png")


@pytest.fixture
def held(tenant_a, lead_a, reviewer_a):
    run = RunFactory(tenant=tenant_a, external_id="run_first", current_agent_id="support-bot")
    approval = ApprovalFactory(
        run=run, step=1, tool_call_id="call_first", tool_name="email.send", arguments=ARGS
    )
    # a little history, so the preview and the analytics have something to say
    past = RunFactory(tenant=tenant_a, external_id="run_past", current_agent_id="support-bot")
    for i in range(12):
        a = ApprovalFactory(
            run=past, tool_name="email.send", arguments=dict(ARGS, subject=f"Day {i}")
        )
        Approval.objects.filter(pk=a.pk).update(
            status=ApprovalStatus.APPROVED,
            decided_by=reviewer_a,
            decided_at=a.requested_at + timezone.timedelta(seconds=20 + 7 * i),
        )
    return {"approval": approval, "ingest": make_key(tenant_a, scopes=("ingest",))}


def api(page, key, method, path, body=None, **params):
    response = page.request.fetch(
        f"{page.base_url}/api/v1{path}",
        method=method,
        data=body,
        params=params or None,
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.ok, response.text()
    return response.json()


def test_always_approve_calls_like_this_then_the_next_identical_call_is_approved_at_once(
    held, page
):
    approval = held["approval"]
    sign_in(page, "lead@a.example", "lead-pass-123", next_path="/rules/")
    suggestion = page.locator("#rule-suggestions .suggestion")
    assert "approved 12 times" in suggestion.inner_text()
    keep(shot(page, "rules-suggestions"), "suggestions")
    page.goto(f"{page.base_url}/approvals/")
    card = page.locator(f"#approval-{approval.public_id}")
    keep(shot(page, "rules-card"), "card")
    card.get_by_role("link", name="Always approve calls like this").click()
    page.wait_for_url("**/rules/new/?approval=*")
    assert page.get_by_label("Tool", exact=True).input_value() == "email.send"
    assert page.get_by_label("Agent", exact=True).input_value() == "support-bot"
    # Per argument: the address's domain is suggested, the short subject kept exactly.
    assert page.locator("input[name='arg_to'][value='suggested']").is_checked()
    assert page.locator("input[name='arg_subject'][value='exact']").is_checked()
    page.locator("input[name='arg_to'][value='exact']").check()
    preview = page.locator("#rule-preview .preview-count")
    preview.filter(has_text="1 of the 13 calls").wait_for()  # the first call itself
    # the preview follows the choices: any subject, and every past mail to bob matches
    page.locator("input[name='arg_subject'][value='any']").check()
    page.locator("#rule-preview .preview-count", has_text="13 of the 13").wait_for()
    keep(shot(page, "rules-editor"), "editor")
    page.get_by_role("button", name="Save rule").click()
    page.wait_for_url("**/rules/?saved=*")
    assert "Saved the rule" in page.locator(".rule-saved").inner_text()
    keep(shot(page, "rules-list"), "list")

    # the runtime asks for the same call again: the rule decides it in the same request
    key = held["ingest"]
    run = {"id": "run_next", "agentId": "support-bot", "agentVersion": 1, "principalId": "p@x"}
    api(page, key, "POST", "/runs", run)
    event = {
        "seq": 1,
        "type": "approval.requested",
        "step": 1,
        "calls": [{"toolCallId": "call_next", "toolName": "email.send", "arguments": ARGS}],
    }
    api(page, key, "POST", "/runs/run_next/events", {"events": [event]})
    started = time.monotonic()
    body = api(page, key, "GET", "/runs/run_next/decisions", wait="10")
    assert time.monotonic() - started < 1.0
    assert body["complete"] is True and body["pending"] == []
    decision = body["decisions"][0]
    assert decision["decision"] == "approved" and decision["decidedBy"] is None
    assert decision["decidedByRule"].startswith("rul_")
    assert decision["arguments"] == ARGS

    page.goto(f"{page.base_url}/approvals/")
    assert page.locator(f"#approval-{approval.public_id}").is_visible()  # decided before: stays
    assert page.locator(".approval-card", has_text="run_next").count() == 0
    assert "run_next" not in page.content()

    page.goto(f"{page.base_url}/runs/run_next/")
    named = page.locator("#run-approvals .decided-by-rule")
    assert named.inner_text().startswith("Always approve email.send from support-bot")
    keep(shot(page, "rules-run-page"), "run-page")

    page.goto(f"{page.base_url}/approvals/stats/")
    page.locator("#stats-tool").wait_for()
    keep(shot(page, "rules-stats"), "stats")
