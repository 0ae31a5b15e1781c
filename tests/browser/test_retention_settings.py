"""/manage/settings/ shows the tenant's real retention policy (issue 27: it used to say
nothing was pruned): the audit log's days, and each other kind's days, as set through the
API. Screenshots at 1440 and 390 px: build/screenshots/manage-retention-*.png."""

import pytest

from console.models import Tenant
from retention.models import RetentionPolicy
from tests.support.browser import shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def policy(tenant_a, admin_a):
    RetentionPolicy.objects.create(tenant=tenant_a, run_days=400, sent_mail_days=None)
    Tenant.objects.filter(pk=tenant_a.pk).update(audit_retention_days=730)
    return admin_a


def test_the_settings_page_shows_the_retention_policy(policy, page):
    sign_in(page, "admin@a.example", "admin-pass-123", next_path="/manage/settings/")
    table = page.locator("#retention-now")
    text = table.inner_text()
    assert "400 days after their last activity" in text
    assert "Sent mail (bodies included)\tforever" in text or "forever" in text
    assert "30 days" in text and "90 days after they were read" in text
    help_text = page.locator("#s-retention-help").inner_text()
    assert "Now: 730 days." in help_text and "signed checkpoint" in help_text
    assert "Nothing is pruned yet" not in page.content()
    table.scroll_into_view_if_needed()
    shot(page, "manage-retention-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    table.scroll_into_view_if_needed()
    shot(page, "manage-retention-390")
