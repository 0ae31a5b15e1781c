"""Sign in with SSO in a real browser against a real OpenID provider (oidc-provider-mock on
127.0.0.1): the first sign-in creates the principal with its mapped role, the second reuses
it, and each refusal (a wrong state, a replayed answer, an unknown issuer, an expired token,
a deactivated principal) is a clear page and a `signin.failed`. Screenshots:
build/screenshots/.

Sync Playwright runs an event loop in the test's thread, so the database is read, after the
page was asked for, from a thread of its own (`db`)."""

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from console.directory.services import sso as sso_services
from console.directory.services import sso_domains
from tests.support.browser import shot
from tests.support.oidc_provider import running_provider, set_user

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("http_issuers_allowed"),
]


def _configure(tenant, admin, issuer):
    sso_services.oidc_update(
        tenant=tenant,
        fields={
            "issuer": issuer,
            "client_id": "gavel-a",
            "client_secret": "browser-secret",
            "role_map": {"gavel-reviewers": "reviewer"},
            "email_domains": ["a.example"],
        },
        viewer=admin,
    )
    sso_domains.sso_domain_pin(tenant=tenant, domain="a.example")  # verified: routes (M6)


@pytest.fixture
def sso_a(tenant_a, admin_a, issuer):
    _configure(tenant_a, admin_a, issuer)
    set_user(issuer, "u-rita", email="rita@a.example", name="Rita", groups=["gavel-reviewers"])
    return tenant_a


def db(fn):
    """Run an ORM read away from Playwright's event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def _principal(external_id):
    from console.models import Principal

    p = Principal.objects.filter(external_id=external_id).first()
    return p and (p.pk, sorted(r.name for r in p.roles.all()), p.reviewed, p.is_active)


def _failures(reason):
    from console.models import AuditEvent

    return AuditEvent.objects.filter(action="signin.failed", data__reason=reason).count()


def _sso(page, org, sub):
    """The person's part: the login page's SSO form, then the provider's form."""
    page.goto(f"{page.base_url}/accounts/login/")
    page.get_by_label("Organisation or work email").fill(org)
    page.get_by_role("button", name="Sign in with SSO").click()
    page.locator("input[name=sub]").first.fill(sub)
    page.get_by_role("button", name="Authorize").click()


def _rewrite_callback(page, change):
    """Let the provider's answer reach the console changed by `change(query) -> query`: the
    provider's redirect (the answer to its form) is fetched and its Location rewritten."""

    def handle(route):
        if route.request.method != "POST":
            route.continue_()
            return
        response = route.fetch(max_redirects=0)
        parts = urlsplit(response.headers["location"])
        query = dict(parse_qsl(parts.query))
        location = f"{parts.scheme}://{parts.netloc}{parts.path}?{urlencode(change(query))}"
        route.fulfill(response=response, headers={**response.headers, "location": location})

    page.route(lambda url: "/oauth2/authorize" in url, handle)


def test_first_sso_sign_in_creates_the_principal_then_a_second_reuses_it(sso_a, page):
    _sso(page, "rita@a.example", "u-rita")
    page.get_by_role("button", name="Sign out").first.wait_for()
    shot(page, "sso-signed-in", full_page=False)
    first = db(lambda: _principal("rita@a.example"))
    assert first[1] == ["reviewer"] and first[2] is True
    page.get_by_role("button", name="Sign out").first.click()
    _sso(page, "tenant-a", "u-rita")
    page.get_by_role("button", name="Sign out").first.wait_for()
    assert db(lambda: _principal("rita@a.example")) == first
    page.goto(f"{page.base_url}/approvals/")
    assert page.get_by_role("heading", name="Sign in to Gavel").count() == 0


def test_the_login_page_offers_sso(sso_a, page):
    page.goto(f"{page.base_url}/accounts/login/")
    assert page.get_by_role("button", name="Sign in with SSO").is_visible()
    shot(page, "sso-login-page")


def test_a_wrong_state_is_refused_with_a_clear_page(sso_a, page):
    _rewrite_callback(page, lambda q: {**q, "state": "forged"})
    _sso(page, "tenant-a", "u-rita")
    page.get_by_role("heading", name="You are not signed in").wait_for()
    assert "not for the sign-in you started" in page.get_by_role("alert").inner_text()
    shot(page, "sso-refused-state")
    assert db(lambda: _failures("state_mismatch")) == 1
    assert db(lambda: _principal("rita@a.example")) is None


def test_a_replayed_answer_is_refused(sso_a, page):
    seen = []
    page.on("request", lambda r: "/callback/" in r.url and seen.append(r.url))
    _sso(page, "tenant-a", "u-rita")
    page.get_by_role("button", name="Sign out").first.click()
    page.get_by_role("heading", name="Sign in to Gavel").wait_for()
    page.goto(seen[0])
    page.get_by_role("heading", name="You are not signed in").wait_for()
    assert db(lambda: _failures("no_attempt")) == 1


def test_an_answer_from_an_unknown_issuer_is_refused(sso_a, page):
    _rewrite_callback(page, lambda q: {**q, "iss": "https://evil.example"})
    _sso(page, "tenant-a", "u-rita")
    page.get_by_role("heading", name="You are not signed in").wait_for()
    assert "unknown issuer" in page.get_by_role("alert").inner_text()
    assert db(lambda: _failures("issuer_mismatch")) == 1


@pytest.fixture
def rita_gone(sso_a):
    from tests.support.factories import PrincipalFactory

    return PrincipalFactory(tenant=sso_a, external_id="rita@a.example", is_active=False)


def test_a_deactivated_principal_is_refused(rita_gone, page):
    _sso(page, "tenant-a", "u-rita")
    page.get_by_role("heading", name="You are not signed in").wait_for()
    assert "deactivated" in page.get_by_role("alert").inner_text()
    assert db(lambda: _failures("deactivated")) == 1
    shot(page, "sso-refused-deactivated")


@pytest.fixture
def expired_provider(tenant_a, admin_a):
    with running_provider(token_max_age=timedelta(seconds=-600)) as url:
        _configure(tenant_a, admin_a, url)
        set_user(url, "u-old", email="old@a.example")
        yield url


def test_an_expired_id_token_is_refused(expired_provider, page):
    _sso(page, "tenant-a", "u-old")
    page.get_by_role("heading", name="You are not signed in").wait_for()
    assert "expired" in page.get_by_role("alert").inner_text()
    assert db(lambda: _failures("invalid_token")) == 1
    assert db(lambda: _principal("old@a.example")) is None


def test_an_admin_edits_sso_settings_in_the_console(sso_a, page):
    from tests.support.browser import sign_in

    sign_in(page, "admin@a.example", "admin-pass-123", next_path="/manage/settings/sso/")
    assert page.get_by_label("Client id").input_value() == "gavel-a"
    assert page.get_by_label("Client secret").input_value() == ""
    page.get_by_label("Roles of the provider's groups").fill("g = no-such-role")
    page.get_by_role("button", name="Save single sign-on").click()
    page.get_by_text("Nothing was saved").wait_for()
    assert page.get_by_text("no role 'no-such-role' in this tenant").is_visible()
    shot(page, "sso-manage-settings-error")
    page.get_by_label("Roles of the provider's groups").fill("gavel-admins = admin")
    page.get_by_role("button", name="Save single sign-on").click()
    page.get_by_text("Saved.").wait_for()
    shot(page, "sso-manage-settings")
