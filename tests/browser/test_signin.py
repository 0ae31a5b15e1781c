"""Sign-in protection and the tenant switcher in a real browser. Screenshots:
build/screenshots/."""

import pytest

from tests.support.browser import shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_tenant_alice(tenant_a, tenant_b):
    from console.directory.services.principals import principal_create
    from tests.support.factories import RunFactory

    for tenant in (tenant_a, tenant_b):
        principal_create(
            tenant=tenant,
            external_id="alice@example.com",
            name="Alice",
            password="alice-pass-123",
            roles=["viewer"],
        )
    RunFactory(tenant=tenant_a, external_id="run_of_a")
    RunFactory(tenant=tenant_b, external_id="run_of_b")


def test_the_lockout_page_says_when_to_try_again(viewer_a, page):
    page.goto(f"{page.base_url}/accounts/login/")
    for _ in range(5):
        page.get_by_label("Email", exact=True).fill("viewer@a.example")
        page.get_by_label("Password").fill("wrong-password")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("alert").wait_for()
    page.get_by_label("Email", exact=True).fill("viewer@a.example")
    page.get_by_label("Password").fill("viewer-pass-123")
    with page.expect_response(lambda r: r.url.endswith("/accounts/login/")) as answer:
        page.get_by_role("button", name="Sign in").click()
    assert answer.value.status == 429
    assert int(answer.value.headers["retry-after"]) > 14 * 60
    alert = page.get_by_role("alert").inner_text()
    assert alert.startswith("Sign-in is paused") and "Try again after" in alert
    assert alert.rstrip(".").endswith("UTC")
    shot(page, "sign-in-locked")


def test_a_person_in_two_tenants_switches_between_them(two_tenant_alice, page):
    sign_in(page, "alice@example.com", "alice-pass-123")
    assert page.locator("#run-rows").get_by_text("run_of_a").is_visible()
    assert page.locator("#run-rows").get_by_text("run_of_b").count() == 0
    switcher = page.get_by_label("Tenant")
    assert switcher.input_value() == "tenant-a"
    shot(page, "tenant-switcher", full_page=False)
    switcher.select_option("tenant-b")
    page.get_by_role("button", name="Switch").click()
    page.wait_for_url("**/runs/")
    assert page.get_by_label("Tenant").input_value() == "tenant-b"
    assert page.locator("#run-rows").get_by_text("run_of_b").is_visible()
    assert page.locator("#run-rows").get_by_text("run_of_a").count() == 0
    page.goto(f"{page.base_url}/runs/run_of_a/")
    assert page.get_by_role("heading", name="Not found").is_visible()
