"""Re-authentication for sensitive browser actions: a session whose last sign-in is older than
15 minutes gives its password again, and the action resumes (GET: through /accounts/reauth/;
POST: the prompt posts the original form again with the password). Keys are exempt."""

import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.contrib.auth import SESSION_KEY

from console.accounts.views import REAUTH_FIELD
from console.core.errors import Forbidden
from console.directory import signin
from console.models import AuditEvent
from tests.support import reauth_urls
from tests.support.factories import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.support.reauth_urls")]

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self):
        self.at = START

    def __call__(self):
        return self.at

    def advance(self, **delta):
        self.at += timedelta(**delta)


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(signin, "now", clock)
    return clock


@pytest.fixture(autouse=True)
def _no_calls():
    reauth_urls.CALLS.clear()
    yield
    reauth_urls.CALLS.clear()


@pytest.fixture
def signed_in(client, clock, admin_a):
    response = client.post(
        "/accounts/login/", {"username": "admin@a.example", "password": "admin-pass-123"}
    )
    assert response.status_code == 302
    return client


def hidden_fields(html: str) -> list[tuple[str, str]]:
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', html)
    return [(name, value) for name, value in found if name != "csrfmiddlewaretoken"]


def test_sign_in_records_its_time_in_the_session(signed_in):
    assert signed_in.session[signin.AUTH_AT_SESSION_KEY] == START.timestamp()


def test_a_recent_sign_in_goes_straight_through(signed_in, clock):
    clock.advance(minutes=14, seconds=59)
    assert signed_in.get("/test/sensitive/").content == b"the form"
    assert signed_in.post("/test/sensitive/", {"role": "admin"}).content == b"done"
    assert reauth_urls.CALLS[0]["post"] == {"role": ["admin"]}


def test_a_stale_get_goes_through_the_reauth_page_and_back(signed_in, clock, admin_a):
    clock.advance(minutes=15)
    response = signed_in.get("/test/sensitive/?tab=keys")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/reauth/?next=%2Ftest%2Fsensitive%2F%3Ftab%3Dkeys"
    page = signed_in.get(response["Location"]).content.decode()
    assert "Confirm your password" in page and f'name="{REAUTH_FIELD}"' in page
    assert ("next", "/test/sensitive/?tab=keys") in hidden_fields(page)

    wrong = signed_in.post(
        "/accounts/reauth/", {"next": "/test/sensitive/?tab=keys", REAUTH_FIELD: "nope"}
    )
    assert wrong.status_code == 200 and "did not match" in wrong.content.decode()
    (failed,) = AuditEvent.objects.filter(action="signin.failed")
    assert failed.data["reason"] == "wrong_password" and failed.data["reauth"] is True
    assert failed.data["username"] == "admin@a.example"

    ok = signed_in.post(
        "/accounts/reauth/", {"next": "/test/sensitive/?tab=keys", REAUTH_FIELD: "admin-pass-123"}
    )
    assert ok.status_code == 302 and ok["Location"] == "/test/sensitive/?tab=keys"
    assert signed_in.session[signin.AUTH_AT_SESSION_KEY] == clock.at.timestamp()
    assert signed_in.get("/test/sensitive/?tab=keys").content == b"the form"
    assert AuditEvent.objects.filter(
        action="signin.succeeded", data__reauth=True, tenant=admin_a.tenant
    ).exists()


def test_reauth_sends_only_to_local_pages(signed_in, clock):
    clock.advance(minutes=20)
    response = signed_in.post(
        "/accounts/reauth/", {"next": "https://evil.example/", REAUTH_FIELD: "admin-pass-123"}
    )
    assert response["Location"] == "/"


def test_a_stale_post_is_not_performed_and_is_posted_again_with_the_password(
    signed_in, clock, admin_a
):
    clock.advance(hours=1)
    form = {"role": ["admin", "lead"], "note": 'quote " and <tag>'}
    prompt = signed_in.post("/test/sensitive/?x=1", {**form, "csrfmiddlewaretoken": "original"})
    assert prompt.status_code == 200 and reauth_urls.CALLS == []
    html = prompt.content.decode()
    assert 'action="/test/sensitive/?x=1"' in html
    assert hidden_fields(html) == [
        ("role", "admin"),
        ("role", "lead"),
        ("note", "quote &quot; and &lt;tag&gt;"),
    ]
    assert html.count('name="csrfmiddlewaretoken"') == 2  # the prompt's own, and sign-out's
    assert 'value="original"' not in html  # the old token is not carried over

    wrong = signed_in.post("/test/sensitive/?x=1", {**form, REAUTH_FIELD: "nope"})
    assert "did not match" in wrong.content.decode() and reauth_urls.CALLS == []

    done = signed_in.post("/test/sensitive/?x=1", {**form, REAUTH_FIELD: "admin-pass-123"})
    assert done.content == b"done"
    (call,) = reauth_urls.CALLS
    assert call["post"] == {"role": ["admin", "lead"], "note": ['quote " and <tag>']}
    assert call["viewer"] == admin_a.pk  # the password never reaches the view
    assert signed_in.session[signin.AUTH_AT_SESSION_KEY] == clock.at.timestamp()


def test_an_htmx_post_gets_the_prompt_in_the_main_area(signed_in, clock):
    clock.advance(minutes=30)
    response = signed_in.post("/test/sensitive/", {"role": "admin"}, HTTP_HX_REQUEST="true")
    assert response["HX-Retarget"] == "#main" and response["HX-Reswap"] == "innerHTML"
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="reauth"') and "<html" not in html
    assert ("role", "admin") in hidden_fields(html)


def test_a_session_without_a_recorded_sign_in_is_stale(client, clock, admin_a):
    client.force_login(admin_a.user)
    session = client.session
    del session[signin.AUTH_AT_SESSION_KEY]
    session.save()
    assert client.get("/test/sensitive/").status_code == 302


def test_reauth_is_under_the_lockout(signed_in, clock):
    clock.advance(minutes=20)
    for _ in range(5):
        signed_in.post("/test/sensitive/", {"role": "x", REAUTH_FIELD: "nope"})
    locked = signed_in.post("/test/sensitive/", {"role": "x", REAUTH_FIELD: "admin-pass-123"})
    assert locked.status_code == 429 and reauth_urls.CALLS == []
    assert "Retry-After" in locked
    assert signed_in.session.get(SESSION_KEY)  # still signed in; only the password is paused


def test_signed_out_and_no_principal_are_handled_first(client, clock):
    assert client.get("/test/sensitive/")["Location"].startswith("/accounts/login/")
    assert client.post("/test/sensitive/", {"a": "b"})["Location"].startswith("/accounts/login/")
    assert client.get("/accounts/reauth/")["Location"].startswith("/accounts/login/")


def test_the_api_helper_exempts_keys_and_refuses_a_stale_session(clock, tenant_a, admin_a):
    from console.models import ApiKey

    raw = make_key(tenant_a, scopes=("manage",), principal=admin_a)
    key = ApiKey.objects.for_raw_key(raw)
    signin.require_recent_auth_api(SimpleNamespace(auth=key, session={}))
    fresh = {signin.AUTH_AT_SESSION_KEY: clock.at.timestamp()}
    signin.require_recent_auth_api(SimpleNamespace(auth=admin_a, session=fresh))
    clock.advance(minutes=15)
    with pytest.raises(Forbidden) as refused:
        signin.require_recent_auth_api(SimpleNamespace(auth=admin_a, session=fresh))
    assert refused.value.code == "reauth_required"
    assert refused.value.details == {"reauthUrl": "/accounts/reauth/"}


def test_the_prompt_posts_again_with_its_own_csrf_token(clock, admin_a):
    """With CSRF enforced, as in a browser: the prompt's form is a valid POST by itself."""
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)

    def token(html):
        return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)

    login = browser.get("/accounts/login/").content.decode()
    browser.post(
        "/accounts/login/",
        {
            "username": "admin@a.example",
            "password": "admin-pass-123",
            "csrfmiddlewaretoken": token(login),
        },
    )
    clock.advance(minutes=16)
    page = browser.get("/runs/").content.decode()
    prompt = browser.post(
        "/test/sensitive/", {"role": "lead", "csrfmiddlewaretoken": token(page)}
    ).content.decode()
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', prompt))
    done = browser.post("/test/sensitive/", {**fields, REAUTH_FIELD: "admin-pass-123"})
    assert done.status_code == 200 and done.content == b"done"
    assert reauth_urls.CALLS[0]["post"] == {"role": ["lead"]}
