"""An admin, through the /manage/ pages only, makes a role that decides `email.*` (view_runs
and decide) and a principal holding it with a password; that reviewer signs in and, in the
inbox, approves an `email.send` call (the runtime reads it approved). A `shell.exec` call is
not in its inbox (the inbox lists what the viewer may decide), its own page shows no decide
controls, and a forced decision (the API, with the session and its CSRF token) is 403
`may_not_decide`: the call stays pending. The held calls come from the factories, made before
the browser starts (the ORM refuses to run beside Playwright's loop)."""

import json

import pytest

from tests.support.browser import shot, sign_in
from tests.support.factories import ApprovalFactory, RunFactory, make_key

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REVIEWER = "mailer@a.example"
PASSWORD = "mailer-pass-7391"


@pytest.fixture
def held(tenant_a, admin_a):
    mail = ApprovalFactory(
        run=RunFactory(tenant=tenant_a, external_id="run_mail"),
        tool_call_id="call_mail",
        tool_name="email.send",
        arguments={"to": "bob@example.com", "subject": "Hello"},
    )
    shell = ApprovalFactory(
        run=RunFactory(tenant=tenant_a, external_id="run_shell"),
        tool_call_id="call_shell",
        tool_name="shell.exec",
        arguments={"command": "rm -rf /tmp/cache"},
    )
    return {
        "mail": mail.public_id,
        "shell": shell.public_id,
        "ingest": make_key(tenant_a, scopes=("ingest",)),
    }


def card(page, approval_id: str):
    return page.locator(f"#approval-{approval_id}")


def test_an_email_only_reviewer_made_in_the_console_decides_mail_but_not_shell(
    held, browser_context, live_server
):
    page = browser_context.new_page()
    page.set_default_timeout(15_000)
    page.base_url = live_server.url
    sign_in(page, "admin@a.example", "admin-pass-123", "/manage/roles/new/")
    page.get_by_label("Name", exact=True).fill("mail-reviewer")
    page.locator("#cap-view_runs").check()
    page.locator("#cap-decide").check()
    page.get_by_label("Tools it may decide").fill("email.*")
    page.get_by_role("button", name="Create role").click()
    page.wait_for_url("**/manage/roles/?saved=mail-reviewer")
    row = page.locator(".role-row", has_text="mail-reviewer").first
    assert "email.*" in row.inner_text()

    page.goto(f"{live_server.url}/manage/principals/new/")
    page.get_by_label("Id", exact=True).fill(REVIEWER)
    page.get_by_label("Name", exact=True).fill("Mail Reviewer")
    page.get_by_label("mail-reviewer", exact=True).check()
    page.locator("#p-password").fill(PASSWORD)
    page.get_by_role("button", name="Create principal").click()
    page.wait_for_url(f"**/manage/principals/{REVIEWER}/")
    shot(page, "manage-principal-mail-reviewer")
    browser_context.clear_cookies()  # the admin signs out; the reviewer signs in

    sign_in(page, REVIEWER, PASSWORD, "/approvals/")
    mail = card(page, held["mail"])
    assert mail.is_visible()
    assert card(page, held["shell"]).count() == 0  # the inbox lists what it may decide
    shot(page, "inbox-mail-reviewer")
    with page.expect_response(lambda r: "/decision/" in r.url) as answer:
        mail.get_by_role("button", name="Approve").click()
    assert answer.value.ok
    mail.locator(".decided-status").wait_for()
    assert "Approved" in mail.inner_text()

    page.goto(f"{live_server.url}/approvals/{held['shell']}/")  # the call's own page: read-only
    shell = card(page, held["shell"])
    assert shell.is_visible() and "shell.exec" in shell.inner_text()
    assert shell.get_by_role("button", name="Approve").count() == 0
    assert shell.get_by_role("button", name="Deny").count() == 0
    assert shell.get_by_label("Message the model reads").count() == 0

    csrf = next(c["value"] for c in browser_context.cookies() if c["name"] == "csrftoken")
    forced = page.request.post(
        f"{live_server.url}/api/v1/approvals/{held['shell']}/decision",
        data=json.dumps({"decision": "approve"}),
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf,
                 "Referer": f"{live_server.url}/approvals/"},
    )  # fmt: skip
    assert forced.status == 403, forced.text()
    assert forced.json()["error"]["code"] == "may_not_decide"

    def decisions(run_id: str) -> dict:
        answer = page.request.get(
            f"{live_server.url}/api/v1/runs/{run_id}/decisions",
            params={"wait": "0"},
            headers={"Authorization": f"Bearer {held['ingest']}"},
        )
        assert answer.ok, answer.text()
        return answer.json()

    assert decisions("run_mail")["decisions"][0]["decision"] == "approved"
    assert decisions("run_shell")["pending"] == ["call_shell"]
    page.close()
