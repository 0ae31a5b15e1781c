"""/manage/audit/ (admin): entries with before → after side by side, filters, keyset pages,
export links carrying the filters, the chain check and the retention; tenants kept apart."""

import pytest

from console.directory.services import audit
from console.models import Tenant

pytestmark = pytest.mark.django_db


def put(tenant, n, **extra):
    return audit(
        tenant=tenant,
        action=extra.pop("action", "budget.updated"),
        object_type="budget",
        object_id=f"bud_{n}",
        before={"name": "Support", "ceilingMinorUnits": n},
        after={"name": "Support", "ceilingMinorUnits": n + 100},
        **extra,
    )


@pytest.fixture
def admin_client(client, admin_a):
    client.force_login(admin_a.user)
    return client


def test_the_page_shows_entries_with_before_and_after(admin_client, tenant_a, admin_a):
    made = put(tenant_a, 7, principal=admin_a, ip="203.0.113.8", user_agent="Firefox/1")
    page = admin_client.get("/manage/audit/").content.decode()
    assert f'id="audit-{made.wire_id}"' in page
    assert "budget.updated" in page and "bud_7" in page
    assert "<code>admin@a.example</code>" in page and "203.0.113.8" in page and "Firefox/1" in page
    row = page[page.index("<code>ceilingMinorUnits</code>") - 80 :]
    assert 'class="is-changed"' in row[:200]  # the changed field is marked
    assert "<pre>7</pre>" in row and "<pre>107</pre>" in row
    assert 'class="is-same"' in page  # the unchanged name is shown, not marked
    assert "kept <strong>forever</strong>" in page
    assert 'aria-current="page">Audit log</a>' in page


def test_filters_pages_and_export_links_carry_the_filters(admin_client, tenant_a):
    for n in range(3):
        put(tenant_a, n)
    put(tenant_a, 9, action="budget.deleted")
    page = admin_client.get("/manage/audit/", {"action": "budget.deleted"}).content.decode()
    assert "bud_9" in page and "bud_1" not in page
    assert 'href="/api/v1/audit?action=budget.deleted&amp;format=csv"' in page
    assert 'href="/api/v1/audit?action=budget.deleted&amp;format=jsonl"' in page


def test_keyset_pages_link_older_entries(admin_client, tenant_a, settings):
    for n in range(55):
        put(tenant_a, n, action="bulk.entry")
    first = admin_client.get("/manage/audit/", {"action": "bulk.entry"}).content.decode()
    assert "bud_54" in first and ">bud_4<" not in first  # 50 on a page, newest first
    start = first.index('href="/manage/audit/?action=bulk.entry&amp;cursor=') + 6
    next_url = first[start : first.index('"', start)].replace("&amp;", "&")
    older = admin_client.get(next_url).content.decode()
    assert "<code>bud_4</code>" in older and "<code>bud_54</code>" not in older
    assert "Newest</a>" in older


def test_a_bad_filter_is_explained_and_lists_nothing(admin_client, tenant_a):
    put(tenant_a, 1)
    response = admin_client.get("/manage/audit/", {"from": "2026-12-05", "to": "2026-12-01"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "These filters are not valid" in page and "<code>to</code>" in page
    assert "bud_1" not in page


def test_the_chain_check_and_the_retention_are_shown(admin_client, tenant_a):
    put(tenant_a, 1)
    Tenant.objects.filter(pk=tenant_a.pk).update(audit_retention_days=90)
    assert (
        "kept for <strong>90 days</strong>" in admin_client.get("/manage/audit/").content.decode()
    )
    status = admin_client.get("/manage/audit/verify/").content.decode()
    assert 'id="chain-status"' in status and "intact" in status
    assert "<html" not in status  # the partial alone, for htmx


def test_another_tenants_entries_never_show(admin_client, tenant_b):
    put(tenant_b, 1, action="secret.action")
    page = admin_client.get("/manage/audit/").content.decode()
    assert "secret.action" not in page
    filtered = admin_client.get("/manage/audit/?action=secret.action").content.decode()
    assert "No entries match these filters" in filtered and "audit-entry" not in filtered


def test_only_admins_see_the_page(client, lead_a):
    client.force_login(lead_a.user)
    assert client.get("/manage/audit/").status_code == 403
    assert client.get("/manage/audit/verify/").status_code == 403
    client.logout()
    assert client.get("/manage/audit/").status_code == 302  # to sign-in


def test_the_known_actions_are_the_tenants_distinct_actions_sorted(
    admin_client, tenant_a, tenant_b
):
    from console.audit.selectors import known_actions

    for n, action in enumerate(["budget.updated", "apikey.created", "budget.updated", "z.last"]):
        put(tenant_a, n, action=action)
    put(tenant_b, 1, action="only.in.b")
    held = known_actions(tenant_id=tenant_a.pk)
    assert held == sorted(set(held)) and {"apikey.created", "budget.updated", "z.last"} <= set(held)
    assert "only.in.b" not in held
    assert known_actions(tenant_id=0) == []
    page = admin_client.get("/manage/audit/").content.decode()
    assert '<option value="apikey.created">' in page and "only.in.b" not in page
