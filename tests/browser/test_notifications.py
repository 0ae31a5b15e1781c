"""/notifications/ and the bell in a real browser: the list, marking one read and all read
with htmx (no reload), the bell's count in the navbar. Screenshots: build/screenshots/."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support.browser import shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def some_notifications(tenant, principal):
    from notifications.models import Notification
    from notifications.services import notify

    now = timezone.now()
    budget = "budget.threshold_crossed"
    texts = [
        (budget, "Budget 'support' reached 80%", "8.00 USD of 10.00 USD spent this month.", 3),
        (
            budget,
            "Budget 'support' reached 100%",
            "10.20 USD of 10.00 USD spent this month. Over budget, runs ask a lead.",
            50,
        ),
        (
            "approval.reminder",
            "send_email has waited 10 minutes",
            "Run run_000042 for alice@example.com waits for a decision.",
            240,
        ),
        (
            "approval.escalated",
            "send_email escalated to you",
            "Nobody decided within 30 minutes; you lead the team 'support'.",
            1500,
        ),
    ]
    made = []
    for kind, title, body, minutes_ago in texts:
        (row,) = notify(
            tenant=tenant,
            kind=kind,
            recipients=[principal],
            title=title,
            body=body,
            url="/approvals/",
        )
        Notification.objects.filter(pk=row.pk).update(at=now - timedelta(minutes=minutes_ago))
        made.append(row)
    Notification.objects.filter(pk=made[3].pk).update(read_at=now)
    return made


@pytest.fixture
def made(lead_a, tenant_a, settings):
    settings.GAVEL_WEBHOOK_WORKER = False  # no mail to send in this test
    return some_notifications(tenant_a, lead_a)


def test_the_notifications_page_and_the_bell(made, page):
    sign_in(page, "lead@a.example", "lead-pass-123", next_path="/notifications/")
    bell = page.locator("#nav-notification-count")
    assert bell.is_visible() and bell.inner_text().startswith("3")
    assert page.get_by_role("heading", name="Notifications").is_visible()
    assert page.locator(".ntf-item").count() == 4
    assert page.locator(".ntf-item.is-unread").count() == 3
    shot(page, "notifications")
    page.evaluate("window.__gavelNoReload = true")
    first = page.locator(f"#notification-{made[0].public_id}")
    first.get_by_role("button", name="Mark read").click()
    page.locator(f"#notification-{made[0].public_id}:not(.is-unread)").wait_for()
    assert page.locator(".ntf-item.is-unread").count() == 2
    page.locator("#nav-notification-count", has_text="2").wait_for()  # swapped with the item
    assert page.locator("#ntf-unread-count").inner_text() == "2"
    page.locator(".ntf-toolbar").get_by_role("link", name="Unread").click()
    page.wait_for_url("**/notifications/?show=unread")
    assert page.locator(".ntf-item").count() == 2
    page.evaluate("window.__gavelNoReload = true")
    page.get_by_role("button", name="Mark all read").click()
    page.get_by_text("No unread notifications.").wait_for()
    assert page.evaluate("window.__gavelNoReload === true")  # htmx swapped, no reload
    shot(page, "notifications-all-read")
    page.goto(f"{page.base_url}/approvals/")
    assert not page.locator("#nav-notification-count").is_visible()  # zero: hidden
    shot(page, "inbox-with-bell", full_page=False)
