"""A request that cannot reach the database answers 503 with Retry-After (console.middleware,
console/api.py), never a 500: the contract's JSON body under /api/v1/, a self-reloading page
elsewhere, rendered without asking the database again. (Against a real stopped PostgreSQL:
tests/outages/test_database_down.py.)"""

import json

import psycopg
import pytest
from django.core.handlers.exception import convert_exception_to_response
from django.db import OperationalError
from django.test import Client, RequestFactory

from console import middleware
from console.directory import access
from runs import api as runs_api
from tests.support.factories import make_key


def _refused(*args, **kwargs):
    raise OperationalError('connection to server at "127.0.0.1" failed: Connection refused')


def test_a_page_answers_a_503_page_that_reloads_itself(client, reviewer_a, monkeypatch):
    client.force_login(reviewer_a.user)
    monkeypatch.setattr(access, "principal_for_user", _refused)
    response = client.get("/runs/")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "Temporarily unavailable" in page
    assert '<meta http-equiv="refresh" content="5">' in page
    assert reviewer_a.external_id not in page  # rendered without the request: no navigation


def test_an_api_call_answers_the_json_error_with_retry_after(ingest_a, monkeypatch):
    monkeypatch.setattr(runs_api, "run_get", _refused)
    response = ingest_a.get("/api/v1/runs/run_1")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {
        "error": {
            "code": "database_unavailable",
            "message": "the database is unreachable; retry later",
            "details": None,
        }
    }


def test_scim_answers_scims_error_shape(tenant_a, monkeypatch):
    from console.directory import selectors_scim

    key = make_key(tenant_a, scopes=("scim",))
    monkeypatch.setattr(selectors_scim, "users", _refused)
    response = Client().get("/scim/v2/Users", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Type"] == "application/scim+json"
    assert response.json() == {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"],
        "status": "503",
        "detail": "the database is unreachable; retry later",
    }


def test_raw_psycopg_errors_are_503_too(tenant_a, monkeypatch):
    def lost(*args, **kwargs):
        raise psycopg.OperationalError("consuming input failed: server closed the connection")

    key = make_key(tenant_a, scopes=("ingest",))
    monkeypatch.setattr(runs_api, "run_get", lost)
    response = Client().get("/api/v1/runs/run_1", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"


@pytest.mark.parametrize(
    ("path", "json_body"), [("/runs/", False), ("/api/v1/runs", True)], ids=["page", "api"]
)
def test_an_error_in_another_middleware_is_a_503_not_a_500(path, json_body, settings):
    """A session saved on the way out that fails has become a 500 in Django's wrapper around
    that middleware; the request was marked, and the 500 is answered as a 503."""
    settings.DEBUG = False
    inner = convert_exception_to_response(_refused)  # what Django wraps each middleware in
    outer = middleware.DatabaseUnavailableMiddleware(inner)
    response = outer(RequestFactory().get(path))
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    if json_body:
        assert json.loads(response.content)["error"]["code"] == "database_unavailable"
    else:
        assert b"Temporarily unavailable" in response.content


def test_other_errors_stay_500(settings):
    settings.DEBUG = False

    def broken(request):
        raise ValueError("a bug, not the database")

    outer = middleware.DatabaseUnavailableMiddleware(convert_exception_to_response(broken))
    assert outer(RequestFactory().get("/runs/")).status_code == 500
