"""Errors of the run API: keys, scopes and tenancy, the order of checks
(401 → 403 → 404 → 413 → 422 → 409), bodies that are not JSON, and failure modes
(503, 429)."""

import json

import pytest
from django.db import OperationalError

from console.models import Principal
from runs.models import Run, RunEvent
from tests.conftest import ApiClient
from tests.factories import make_key
from tests.runs.batches import RUNS, events_url, new_run, post_events, step_events

pytestmark = pytest.mark.django_db


def test_no_key_wrong_key_revoked_key_are_401(client, tenant_a):
    from django.utils import timezone

    from console.models import ApiKey

    assert ApiClient(client, None).post(RUNS, new_run()).status_code == 401
    assert ApiClient(client, "gvl_wrong").post(RUNS, new_run()).status_code == 401
    raw = make_key(tenant_a)
    ApiKey.objects.update(revoked_at=timezone.now())
    response = ApiClient(client, raw).post(RUNS, new_run())
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def test_a_decide_only_key_is_403_on_ingest(decide_a):
    response = decide_a.post(RUNS, new_run())
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_scope"
    assert decide_a.get(RUNS).status_code == 403


def test_another_tenants_run_is_404_and_both_tenants_may_hold_run_1(ingest_a, ingest_b, admitted):
    assert ingest_b.get(f"{RUNS}/run_1").status_code == 404
    response = post_events(ingest_b, step_events(1, 1))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "run_not_found"
    assert ingest_b.post(RUNS, new_run()).status_code == 201
    assert post_events(ingest_b, step_events(1, 1)).status_code == 200
    assert ingest_a.get(f"{RUNS}/run_1").json()["lastSeq"] == 0
    assert [r["id"] for r in ingest_b.get(RUNS).json()["items"]] == ["run_1"]
    assert Run.objects.filter(external_id="run_1").count() == 2


def test_order_of_checks(client, ingest_a, admitted, tenant_a, settings):
    huge = json.dumps({"events": [{"seq": 1, "type": "nope", "pad": "x" * 3_000_000}]})
    bad = {"events": [{"seq": 1, "type": "nope"}]}
    decide_key = make_key(tenant_a, scopes=("decide",), principal=Principal.objects.first())
    anonymous = ApiClient(client, None)
    decider = ApiClient(client, decide_key)
    # No key beats a missing scope, which beats an unknown run, which beats a huge body...
    assert anonymous.post(events_url("nope"), raw=huge).status_code == 401
    assert decider.post(events_url("nope"), raw=huge).status_code == 403
    assert ingest_a.post(events_url("nope"), raw=huge).status_code == 404
    assert ingest_a.post(events_url("nope"), bad).status_code == 404
    response = ingest_a.post(events_url(), raw=huge)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    # ...which beats an invalid body, which beats a conflict.
    assert ingest_a.post(events_url(), bad).status_code == 422
    gap = step_events(5, 1)
    assert post_events(ingest_a, gap).status_code == 409


def test_a_body_that_is_not_json_is_422_after_the_404_check(ingest_a, admitted):
    assert ingest_a.post(events_url("nope"), raw="{not json").status_code == 404
    response = ingest_a.post(events_url(), raw="{not json")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["details"] == [{"path": "body", "message": "not valid JSON"}]
    assert ingest_a.post(RUNS, raw="[1, 2").status_code == 422
    assert RunEvent.objects.count() == 0


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_422_and_nothing_written(ingest_a, admitted, constant):
    raw = (
        '{"events": [{"seq": 1, "type": "tool.result", "step": 1, "toolCallId": "c",'
        f' "toolName": "t", "isError": false, "result": {{"x": {constant}}}}}]}}'
    )
    response = ingest_a.post(events_url(), raw=raw)
    assert response.status_code == 422
    assert response.json()["error"]["details"] == [{"path": "body", "message": "not valid JSON"}]
    assert RunEvent.objects.count() == 0


def test_unknown_api_path_and_wrong_method_answer_json(ingest_a):
    response = ingest_a.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    response = ingest_a.put(RUNS, new_run())
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("method", ["get", "post"])
def test_database_unreachable_is_503_with_retry_after(ingest_a, admitted, monkeypatch, method):
    """Every statement fails, as when PostgreSQL is down: the first one (the key lookup)
    answers 503 with the contract's body."""
    from django.db.backends import utils

    def down(self, *args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(utils.CursorWrapper, "execute", down)
    if method == "get":
        response = ingest_a.get(f"{RUNS}/run_1")
    else:
        response = post_events(ingest_a, step_events(1, 1))
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "database_unavailable"


def test_rate_limit_is_429_with_retry_after(client, tenant_a):
    from console.models import ApiKey

    raw = make_key(tenant_a)
    ApiKey.objects.update(rate_per_minute=60, rate_burst=2)
    api = ApiClient(client, raw)
    assert api.get(RUNS).status_code == 200
    assert api.get(RUNS).status_code == 200
    response = api.get(RUNS)
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "rate_limited"
