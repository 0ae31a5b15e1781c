"""The served OpenAPI schema of the run endpoints (names as the contract spells them)."""

import json

import pytest

pytestmark = pytest.mark.django_db


def test_openapi_describes_the_runs_endpoints_in_camel_case(client):
    schema = client.get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    assert {"/api/v1/runs", "/api/v1/runs/{runId}", "/api/v1/runs/{runId}/events"} <= set(paths)
    new_run_schema = schema["components"]["schemas"]["NewRunIn"]
    assert {"id", "agentId", "agentVersion", "principalId"} <= set(new_run_schema["required"])
    run_out = schema["components"]["schemas"]["RunOut"]["properties"]
    assert "pendingCalls" in run_out and "usageByModel" in run_out
    events = json.dumps(schema["components"]["schemas"]["EventBatchIn"])
    assert "discriminator" in events


def test_openapi_names_path_parameters_as_the_contract_does(client):
    schema = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/runs/{runId}/events" in schema["paths"]
    assert "/api/v1/approvals/{approvalId}/decision" in schema["paths"]
    assert not [p for p in schema["paths"] if "run_id" in p or "approval_id" in p]
    params = schema["paths"]["/api/v1/runs/{runId}"]["get"]["parameters"]
    assert [p["name"] for p in params if p["in"] == "path"] == ["runId"]
