"""Optional tracing and error reporting (ops/telemetry.py): a span per request continuing the
incoming traceparent, the runtime's trace ids joined to the ingest span; Sentry events
scrubbed of credentials and tagged with the request id."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ops import telemetry
from ops.context import request_id
from tests.support.batches import new_run

pytestmark = pytest.mark.django_db

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    telemetry.setup_tracing(exporter=exporter)
    try:
        yield exporter
    finally:
        telemetry.teardown_tracing()


def test_off_unless_configured():
    assert not telemetry.enabled()


def test_a_span_per_request_continuing_the_incoming_traceparent(client, spans):
    response = client.get("/healthz", headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
    assert response.status_code == 200
    (span,) = spans.get_finished_spans()
    assert span.name == "GET /healthz"
    assert format(span.context.trace_id, "032x") == TRACE
    assert format(span.parent.span_id, "016x") == PARENT
    assert span.attributes["http.route"] == "/healthz"
    assert span.attributes["gavel.request_id"] == response["X-Request-Id"]


def test_runtime_trace_ids_joined_to_the_ingest_span(ingest_a, spans):
    assert ingest_a.post("/api/v1/runs", new_run("run_t")).status_code == 201
    runtime = f"00-{TRACE}-{PARENT}-01"
    events = [
        {"seq": 1, "type": "step.started", "step": 1, "agentId": "a", "model": "m"},
        {"seq": 2, "type": "step.finished", "step": 1, "model": "m", "finishReason": "stop",
         "traceId": runtime, "usage": {"inputTokens": 1, "outputTokens": 1, "costMinorUnits": 0}},
        {"seq": 3, "type": "step.started", "step": 2, "agentId": "a", "model": "m"},
        {"seq": 4, "type": "step.finished", "step": 2, "model": "m", "finishReason": "stop",
         "traceId": "tr_plain", "usage": {"inputTokens": 1, "outputTokens": 1,
                                          "costMinorUnits": 0}},
    ]  # fmt: skip
    answer = ingest_a.post("/api/v1/runs/run_t/events", {"events": events})
    assert answer.status_code == 200, answer.content
    ingest = next(s for s in spans.get_finished_spans() if "events" in s.name)
    assert list(ingest.attributes["gavel.runtime_trace_ids"]) == [runtime, "tr_plain"]
    assert [format(link.context.trace_id, "032x") for link in ingest.links] == [TRACE]


def test_sentry_events_scrubbed_and_tagged():
    event = {
        "request": {
            "headers": {"Authorization": "Bearer gvl_secret", "Cookie": "sessionid=x",
                        "Accept": "text/html"},
            "data": {"password": "hunter2"},
            "query_string": "token=abc",
        }
    }  # fmt: skip
    token = request_id.set("rid-9")
    try:
        scrubbed = telemetry._scrub_event(event, {})
    finally:
        request_id.reset(token)
    headers = scrubbed["request"]["headers"]
    assert headers["Authorization"] == headers["Cookie"] == telemetry.SCRUBBED
    assert headers["Accept"] == "text/html"
    assert scrubbed["request"]["data"] == telemetry.SCRUBBED
    assert scrubbed["request"]["query_string"] == telemetry.SCRUBBED
    assert scrubbed["tags"]["request_id"] == "rid-9"
