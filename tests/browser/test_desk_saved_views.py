"""Saved views of the desk in a real browser: a reviewer filters, saves the filter set under a
name (typed without the desk's keys firing), finds it among the views, opens it again, renames
and deletes it; at 390 px the views and their forms fit the width.

Rows are made before `page` is asked for (the ORM refuses to run beside Playwright's loop)."""

import pytest
from django.utils import timezone

from tests.support.browser import shot, sign_in
from tests.support.factories import ApprovalFactory, RunFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROWS = "li.desk-row"


@pytest.fixture
def calls(tenant_a, reviewer_a):
    now = timezone.now()
    for i, tool in enumerate(["send_email"] * 3 + ["run_sql"] * 2):
        ApprovalFactory(
            run=RunFactory(tenant=tenant_a, external_id=f"run_sv_{i}"),
            tool_call_id=f"call_{i}",
            tool_name=tool,
            requested_at=now - timezone.timedelta(minutes=5 - i),
        )


def _views(page) -> list[str]:
    return [t.strip() for t in page.locator(".desk-views a.desk-saved").all_inner_texts()]


def test_save_open_rename_and_delete_a_view(calls, page):
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    assert page.locator(ROWS).count() == 5
    page.get_by_label("Tool").select_option("send_email")  # applies itself
    page.wait_for_url("**/approvals/?*tool=send_email*")
    assert page.locator(ROWS).count() == 3
    page.get_by_text("Save view…").click()
    name = page.get_by_label("Name of these filters")
    name.click()
    page.keyboard.type("Just mail, ask again")  # J, A, D... land in the field, nothing decided
    assert name.input_value() == "Just mail, ask again"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    saved = page.locator(".desk-views a.desk-saved")
    assert _views(page) == ["Just mail, ask again"]
    assert saved.first.get_attribute("aria-current") == "page"
    assert page.locator("#desk-count").get_attribute("data-count") == "3"
    shot(page, "desk-saved-view", full_page=False)

    page.get_by_role("link", name="Clear filters").click()
    page.wait_for_url("**/approvals/")
    assert page.locator(ROWS).count() == 5
    assert saved.first.get_attribute("aria-current") is None
    saved.first.click()
    page.wait_for_url("**/approvals/?tool=send_email")
    assert page.locator(ROWS).count() == 3

    page.get_by_text("Your views…").click()
    rename = page.get_by_label("Name of the view Just mail, ask again")
    rename.fill("Outgoing mail")
    with page.expect_navigation(url="**/approvals/?tool=send_email"):
        page.get_by_role("button", name="Rename").click()
    assert _views(page) == ["Outgoing mail"]

    page.get_by_text("Your views…").click()
    page.get_by_text("Delete…").click()
    with page.expect_navigation(url="**/approvals/"):
        page.get_by_role("button", name="Yes, delete “Outgoing mail”").click()
    assert _views(page) == [] and page.locator(ROWS).count() == 5
    assert page.get_by_text("Your views…").count() == 0


def test_a_taken_name_is_said_on_the_desk_and_the_views_fit_390_px(calls, page):
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    for tool, name in (("send_email", "Mail"), ("run_sql", "Mail")):
        page.goto(f"{page.base_url}/approvals/?tool={tool}")
        page.get_by_text("Save view…").click()
        page.get_by_label("Name of these filters").fill(name)
        with page.expect_navigation():
            page.get_by_role("button", name="Save", exact=True).click()
    assert _views(page) == ["Mail"]
    assert "You already have a view named 'Mail'." in page.locator("#desk-status").inner_text()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{page.base_url}/approvals/?tool=run_sql")
    page.get_by_text("Save view…").click()
    page.get_by_text("Your views…").click()
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    shot(page, "desk-saved-views-390", full_page=False)
