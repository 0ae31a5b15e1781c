"""Django's middleware on the async path (console.middleware): the same headers, the same CSRF
refusals and the same session saves as Django's own, without a thread hop for hooks that only
compute (an API call goes through the whole stack without one)."""

import json

import pytest
from django.test import AsyncClient
from django.utils import deprecation

from console import middleware
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_hops(monkeypatch):
    """Fails the test if a middleware hook is sent to a thread."""
    hops = []

    def refuse(fn, **kwargs):
        hops.append(fn)
        raise AssertionError(f"{fn} was sent to a thread")

    monkeypatch.setattr(middleware, "sync_to_async", refuse)  # ours
    monkeypatch.setattr(deprecation, "sync_to_async", refuse)  # Django's MiddlewareMixin
    return hops


async def test_an_api_call_gets_every_security_header_without_a_hook_hop(
    tenant_a, no_hops, settings
):
    from asgiref.sync import sync_to_async

    settings.SECURE_HSTS_SECONDS = 3600
    key = await sync_to_async(make_key)(tenant_a, scopes=("ingest",))
    headers = {"Authorization": f"Bearer {key}"}
    response = await AsyncClient().get("/api/v1/runs", headers=headers, secure=True)
    assert response.status_code == 200
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Strict-Transport-Security"].startswith("max-age=3600")
    assert "default-src 'self'" in response["Content-Security-Policy"]
    assert no_hops == []


async def test_a_form_post_without_a_csrf_token_is_refused_on_the_async_path(viewer_a):
    client = AsyncClient(enforce_csrf_checks=True)
    response = await client.post(
        "/accounts/login/", {"username": viewer_a.external_id, "password": "pw-viewer-123"}
    )
    assert response.status_code == 403


async def test_signing_in_on_the_async_path_saves_the_session(viewer_a):
    from asgiref.sync import sync_to_async

    client = AsyncClient(enforce_csrf_checks=True)
    page = await client.get("/accounts/login/")
    token = page.cookies["csrftoken"].value
    password = await sync_to_async(_password_for)(viewer_a)
    response = await client.post(
        "/accounts/login/",
        {"username": viewer_a.external_id, "password": password, "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302, response.content
    assert response.cookies["sessionid"].value  # saved (in a thread: it writes)
    runs = await client.get("/runs/")
    assert runs.status_code == 200  # signed in by that session


def _password_for(principal) -> str:
    principal.user.set_password("pw-async-123")
    principal.user.save()
    return "pw-async-123"


def test_djangos_500_page_under_the_api_becomes_the_internal_error_body(rf, caplog):
    """An exception outside an API operation (a middleware, the URL resolver) still answers
    the contract's body, with a request id that the log line carries too."""
    from django.http import HttpResponseServerError

    html = HttpResponseServerError("<h1>Server Error (500)</h1>", content_type="text/html")
    with caplog.at_level("ERROR", logger="console.api"):
        response = middleware._api_error_body(rf.get("/api/v1/runs"), html)
    assert response.status_code == 500
    error = json.loads(response.content)["error"]
    assert error["code"] == "internal_error"
    assert response["X-Request-Id"] == error["details"]["requestId"]
    assert any(error["details"]["requestId"] in r.getMessage() for r in caplog.records)
    page = middleware._api_error_body(rf.get("/runs/"), html)
    assert page is html  # pages keep Django's own
