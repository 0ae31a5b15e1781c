"""The console in a real browser: sign-in, the run list's filters and pages (htmx, no full
reload), the run page's sections, keyboard reach and labels. Screenshots: build/screenshots/."""

import re

import pytest

from tests.support.browser import shot, sign_in
from tests.support.docs import _docs_copy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _mark_document(page):
    """A flag on window that survives htmx swaps but not a full page load."""
    page.evaluate("window.__gavelNoReload = true")


def _not_reloaded(page) -> bool:
    return page.evaluate("window.__gavelNoReload === true")


def _row_ids(page) -> list[str]:
    return page.locator("#run-rows tr.run-row").evaluate_all(
        "rows => rows.map(r => r.dataset.runId)"
    )


def test_sign_in_and_out(viewer_a, page):
    page.goto(f"{page.base_url}/runs/")
    assert "/accounts/login/" in page.url
    shot(page, "sign-in")
    page.get_by_label("Email", exact=True).fill("viewer@a.example")
    page.get_by_label("Password").fill("wrong-password")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text().startswith("That email and password")
    sign_in(page, "viewer@a.example", "viewer-pass-123")
    assert page.get_by_role("heading", name="Runs").is_visible()
    assert page.locator("header").get_by_text("Tenant A").is_visible()
    page.get_by_role("button", name="Sign out").click()
    page.goto(f"{page.base_url}/runs/")
    assert "/accounts/login/" in page.url


def test_filters_update_the_table_without_reload_and_live_in_the_url(viewer_a, list_runs, page):
    sign_in(page, "viewer@a.example", "viewer-pass-123")
    assert len(_row_ids(page)) == 36
    _docs_copy(shot(page, "runs-list"), "runs-list.png")
    _mark_document(page)
    page.get_by_label("Status").select_option("failed")
    page.wait_for_url(re.compile(r"status=failed"))
    page.wait_for_function("document.querySelectorAll('#run-rows tr.run-row').length === 6")
    statuses = page.locator("#run-rows tr.run-row td:first-child").all_inner_texts()
    assert set(statuses) == {"failed"}
    assert _not_reloaded(page)
    page.get_by_label("Group by").select_option("conversation")
    page.wait_for_url(re.compile(r"group=conversation"))
    page.locator("#run-rows tr.group", has_text="Conversation:").first.wait_for()
    assert _not_reloaded(page)
    _docs_copy(shot(page, "runs-filtered"), "runs-filtered.png")
    url = page.url
    page.goto(url)  # shareable: the same URL shows the same table
    assert len(_row_ids(page)) == 6


def test_run_id_search_and_principal_filter(viewer_a, list_runs, page):
    sign_in(page, "viewer@a.example", "viewer-pass-123")
    page.get_by_label("Run id").fill("run_001")
    page.get_by_label("Run id").press("Enter")
    page.wait_for_url(re.compile(r"q=run_001"))
    page.wait_for_function("document.querySelectorAll('#run-rows tr.run-row').length === 10")
    page.get_by_role("link", name="Reset").click()
    page.get_by_label("Principal", exact=True).fill("alice@example.com")
    page.get_by_label("Principal", exact=True).press("Enter")
    page.wait_for_url(re.compile(r"principal=alice"))
    page.wait_for_function(
        "[...document.querySelectorAll('#run-rows tr.run-row td:nth-child(5)')]"
        ".every(td => td.textContent.trim() === 'alice@example.com')"
    )


def test_pagination_older_and_newer(viewer_a, list_runs, page):
    runs = [r.external_id for r in list_runs]  # newest first
    sign_in(page, "viewer@a.example", "viewer-pass-123", next_path="/runs/?limit=10")
    first = _row_ids(page)
    assert set(first) == set(runs[:10])  # grouped by principal within the page
    _mark_document(page)
    page.get_by_role("link", name="Older →").click()
    page.wait_for_url(re.compile(r"before="))
    page.locator('tr[data-run-id="run_0010"]').wait_for()
    assert set(_row_ids(page)) == set(runs[10:20])
    page.get_by_role("link", name="← Newer").click()
    page.wait_for_url(re.compile(r"after="))
    page.locator('tr[data-run-id="run_0000"]').wait_for()
    assert _row_ids(page) == first
    assert _not_reloaded(page)
    page.go_back()  # history restores the older page
    page.locator('tr[data-run-id="run_0010"]').wait_for()
    shot(page, "runs-older-page")


def test_run_page_sections(viewer_a, rich_run, page):
    run = rich_run
    sign_in(page, "viewer@a.example", "viewer-pass-123", next_path=f"/runs/{run.external_id}/")
    for element_id in (
        "run-header",
        "run-usage",
        "steps",
        "step-1",
        "step-2",
        "step-3",
        "run-todos",
        "run-verdicts",
        "run-approvals",
    ):
        assert page.locator(f"#{element_id}").is_visible(), element_id
    assert page.locator("#run-usage progress").count() == 3
    assert page.locator("#steps img.inline-image").evaluate("img => img.naturalWidth") == 96
    assert page.locator("#steps a[href='https://cdn.example/receipt.png']").count() == 1
    assert page.locator("#steps .tool-call.is-error").count() == 1
    assert page.locator("#steps .handoff").count() == 2
    assert page.locator(".verdict-blocked").is_visible()
    assert page.get_by_role("link", name="run_child_billing").first.is_visible()
    assert page.get_by_role("button", name="Approve").count() == 0  # a viewer decides nothing
    _docs_copy(shot(page, "run-page"), "run-page.png")
    page.locator("#step-3 details.long summary").click()
    assert page.locator("#step-3 details.long").evaluate("d => d.open")


def test_keyboard_reach_focus_style_and_labels(viewer_a, few_runs, page):
    sign_in(page, "viewer@a.example", "viewer-pass-123")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    reached = set()
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.add(
            page.evaluate("document.activeElement.id || document.activeElement.textContent.trim()")
        )
    assert {"f-q", "f-status", "f-group", "run_0000"} <= reached
    page.focus("#f-status")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"
    unlabelled = page.evaluate(
        """[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
           .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                         && !el.textContent.trim()).map(el => el.outerHTML)"""
    )
    assert unlabelled == []
    assert page.locator("header").count() == 1 and page.locator("main").count() == 1
    assert page.locator("nav[aria-label='Main']").count() == 1
    shot(page, "focus", full_page=False)


def test_reviewer_sees_the_inbox_card_with_controls_on_the_run_page(reviewer_a, rich_run, page):
    path = f"/runs/{rich_run.external_id}/"
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path=path)
    card = page.locator("#run-approvals article.approval-card")
    assert card.get_by_role("button", name="Approve").is_visible()
    assert card.get_by_role("button", name="Deny").is_visible()
    assert card.get_by_label("Message the model reads").is_visible()
    card.scroll_into_view_if_needed()
    _docs_copy(shot(page, "run-page-reviewer", full_page=False), "run-page-reviewer.png")
