"""An admin in a real browser: searches principals, edits a role's tool globs watching the live
preview of the known tools they match, and deactivates someone, giving the password again
because the sign-in is "old" (the re-authentication window set to zero for that step).
Screenshots: build/screenshots/; with GAVEL_DOCS_SCREENSHOTS=1 also docs/screenshots/
manage-principals.png, manage-roles.png and manage-teams.png."""

import pytest
from playwright.sync_api import expect

from console.models import Team
from tests.support.browser import shot, sign_in
from tests.support.docs import _docs_copy
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def directory(tenant_a, admin_a, lead_a, reviewer_a, viewer_a):
    people = [
        PrincipalFactory(
            tenant=tenant_a,
            external_id=f"{n}@a.example",
            name=n.title(),
            email=f"{n}@mail.a.example",
            role=role,
        )
        for n, role in (("carol", "reviewer"), ("dmitri", "viewer"), ("erin", "lead"))
    ]
    PrincipalFactory(tenant=tenant_a, external_id="svc-billing-7", name="", reviewed=False)
    PrincipalFactory(tenant=tenant_a, external_id="user_4821", name="", reviewed=False)
    support = Team.objects.create(tenant=tenant_a, name="support")
    support.principals.add(people[0], reviewer_a, lead_a)
    support.leads.add(lead_a)
    Team.objects.create(tenant=tenant_a, name="billing").principals.add(people[2])
    run = RunFactory(tenant=tenant_a)
    for tool in ("email.send", "email.read", "shell.exec", "crm.update", "sms.send"):
        ApprovalFactory(run=run, tool_name=tool)
    return tenant_a


def test_an_admin_searches_edits_globs_with_the_live_preview_and_deactivates(
    directory, settings, live_server, browser_context
):
    page = browser_context.new_page()
    page.set_default_timeout(15_000)
    page.base_url = live_server.url
    sign_in(page, "admin@a.example", "admin-pass-123", "/manage/principals/")
    assert page.locator("#review-queue").get_by_text("svc-billing-7").is_visible()
    _docs_copy(shot(page, "manage-principals"), "manage-principals.png")

    page.get_by_label("Search").fill("carol")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator(".principals-table tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1 and "carol@a.example" in rows.first.inner_text()

    page.goto(f"{live_server.url}/manage/roles/reviewer/")
    tools = page.get_by_label("Tools it may decide")
    tools.fill("email.*")
    preview = page.locator("#tool-preview")
    expect(preview).to_contain_text("2 of 5 known tools")  # swapped in as it was typed
    expect(preview).to_contain_text("email.send")
    expect(preview).not_to_contain_text("shell.exec")
    _docs_copy(shot(page, "manage-roles"), "manage-roles.png")
    page.get_by_role("button", name="Save role").click()
    page.wait_for_url("**/manage/roles/?saved=reviewer")
    reviewer_row = page.locator(".role-row", has_text="reviewer").first
    assert "email.*" in reviewer_row.inner_text()

    page.goto(f"{live_server.url}/manage/teams/")
    _docs_copy(shot(page, "manage-teams"), "manage-teams.png")

    settings.GAVEL_REAUTH_SECONDS = 0  # the sign-in is now too old for a sensitive action
    page.goto(f"{live_server.url}/manage/principals/carol@a.example/")
    page.get_by_text("Deactivate…").click()  # asks first: nothing is destroyed in one click
    page.get_by_role("button", name="Deactivate carol@a.example").click()
    page.get_by_label("Password for admin@a.example").fill("admin-pass-123")
    page.get_by_role("button", name="Confirm and continue").click()
    page.locator("#saved").wait_for()
    assert "Deactivated" in page.locator("#saved").inner_text()
    assert page.get_by_role("button", name="Reactivate carol@a.example").is_visible()
    shot(page, "manage-principal-deactivated")
    page.close()
