"""/manage/audit/ in a real browser with a few entries made by the services the pages call (a
role created and then changed, a principal deactivated, the tenant's settings changed): the
changed fields show before → after, and the chain check says intact. Screenshot:
build/screenshots/manage-audit.png; with GAVEL_DOCS_SCREENSHOTS=1 also
docs/screenshots/manage-audit.png."""

import pytest
from playwright.sync_api import expect

from console.directory.services.principals import principal_update
from console.directory.services.roles import role_add, role_update
from console.directory.services.tenant import tenant_update
from tests.support.browser import shot, sign_in
from tests.support.docs import _docs_copy
from tests.support.factories import PrincipalFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def entries(tenant_a, admin_a):
    carol = PrincipalFactory(tenant=tenant_a, external_id="carol@a.example", name="Carol")
    role = role_add(
        tenant=tenant_a,
        fields={"name": "mail-reviewer", "capabilities": ["view_runs", "decide"],
                "decide_tools": ["email.send"]},
        viewer=admin_a,
    )  # fmt: skip
    role_update(role=role, fields={"decide_tools": ["email.*", "sms.send"]}, viewer=admin_a)
    principal_update(principal=carol, fields={"active": False}, viewer=admin_a)
    tenant_update(viewer=admin_a, fields={"approval_ttl_seconds": 7200})
    return tenant_a


def test_the_audit_page_shows_entries_with_before_and_after(entries, browser_context, live_server):
    page = browser_context.new_page()
    page.set_default_timeout(15_000)
    page.base_url = live_server.url
    sign_in(page, "admin@a.example", "admin-pass-123", "/manage/audit/")
    updated = page.locator(".audit-entry", has_text="role.updated")
    expect(updated).to_have_count(1)
    changed = updated.locator("tr.is-changed")
    expect(changed).to_have_count(1)
    expect(changed.locator(".audit-before")).to_contain_text("email.send")
    expect(changed.locator(".audit-after")).to_contain_text("email.*")
    expect(page.locator(".audit-entry", has_text="principal.deactivated")).to_have_count(1)
    expect(page.locator(".audit-entry", has_text="tenant.updated")).to_contain_text("7200")
    page.get_by_role("button", name="Check the chain").click()
    expect(page.locator("#chain-status")).to_contain_text("intact")
    _docs_copy(shot(page, "manage-audit"), "manage-audit.png")
    page.close()
