"""/manage/keys/ and /manage/webhooks/ in Chromium against the live server: an admin creates a
key, sees its secret once, copies it with the button (the clipboard holds it), and the key
works against the API; then registers a webhook and sends it a test event, whose delivery
shows under it. Screenshots: build/screenshots/; with GAVEL_DOCS_SCREENSHOTS=1 also
docs/screenshots/manage-keys.png, manage-webhooks.png and manage-settings.png.

Rows are made before `page` is asked for (the ORM refuses to run beside Playwright's loop);
afterwards the test speaks only HTTP.
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.support.browser import shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def keep(path: Path, name: str) -> None:
    if os.environ.get("GAVEL_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS / f"{name}.png")


@pytest.fixture
def console(settings, admin_a, reviewer_a):
    settings.GAVEL_WEBHOOK_WORKER = False  # the test event stays queued (no real endpoint)
    return admin_a


def test_an_admin_makes_a_key_copies_its_secret_once_and_it_works(console, page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=page.base_url)
    sign_in(page, "admin@a.example", "admin-pass-123", next_path="/manage/keys/")
    page.get_by_label("Name").fill("support bot")
    page.get_by_label("Acts as principal").fill("reviewer@a.example")
    page.get_by_label("decide: decide approvals as its principal").check()
    page.get_by_label("Requests per minute").fill("600")
    page.get_by_role("button", name="Create key").click()
    notice = page.locator("#created-key")
    assert "you will not see it again" in notice.inner_text()
    secret = page.locator("#new-secret").inner_text().strip()
    assert secret.startswith("gvl_")
    copy = notice.locator("button[data-copy-from]")
    assert copy.inner_text() == "Copy"
    copy.click()
    page.wait_for_function("document.querySelector('#created-key .copy-status').textContent")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    assert copy.inner_text() == "Copied"
    row = page.locator("tr.key-row", has_text="support bot")
    assert "reviewer@a.example" in row.inner_text() and "600/min" in row.inner_text()
    keep(shot(page, "manage-keys"), "manage-keys")

    # The key works: its scopes are ingest and decide.
    answer = page.request.get(
        f"{page.base_url}/api/v1/approvals", headers={"Authorization": f"Bearer {secret}"}
    )
    assert answer.status == 200, answer.text()

    # Never shown again.
    page.goto(f"{page.base_url}/manage/keys/")
    assert secret not in page.content()

    # Revoked (with its confirmation), it is refused.
    row = page.locator("tr.key-row", has_text="support bot")
    row.get_by_text("Revoke…").click()
    row.get_by_role("button", name="Yes, revoke “support bot”").click()
    page.wait_for_url("**/manage/keys/**")
    assert "revoked" in page.locator("tr.key-row", has_text="support bot").inner_text()
    answer = page.request.get(
        f"{page.base_url}/api/v1/approvals", headers={"Authorization": f"Bearer {secret}"}
    )
    assert answer.status == 401


def test_an_admin_registers_a_webhook_and_sends_it_a_test_event(console, page):
    sign_in(page, "admin@a.example", "admin-pass-123", next_path="/manage/webhooks/")
    page.get_by_label("URL").fill("https://hooks.example/gavel")
    page.get_by_label("approval.decided").check()
    page.get_by_role("button", name="Register webhook").click()
    notice = page.locator("#created-webhook")
    assert "you will not see it again" in notice.inner_text()
    assert page.locator("#new-secret").inner_text().startswith("whsec_")
    hook = page.locator("article.hook", has_text="https://hooks.example/gavel")
    assert "No deliveries yet" in hook.inner_text()
    hook.get_by_role("button", name="Send test event").click()
    page.wait_for_url("**/manage/webhooks/**/test/")
    assert "Test event queued" in page.locator("#tested").inner_text()
    hook = page.locator("article.hook", has_text="https://hooks.example/gavel")
    new = hook.locator("tr.delivery.is-new")
    assert "webhook.test" in new.inner_text() and "pending" in new.inner_text()
    keep(shot(page, "manage-webhooks"), "manage-webhooks")

    page.goto(f"{page.base_url}/manage/settings/")
    page.get_by_label("Keep audit entries for").fill("365")
    page.get_by_role("button", name="Save settings").click()
    assert "Settings saved" in page.locator("#settings-saved").inner_text()
    assert "Now: 365 days" in page.content()
    keep(shot(page, "manage-settings"), "manage-settings")
