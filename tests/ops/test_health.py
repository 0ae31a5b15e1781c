"""/healthz, /readyz and /metrics as the contract's "Processes, health and metrics" says."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from ops import checks
from ops.context import Lifecycle
from ops.models import WorkerHeartbeat

pytestmark = pytest.mark.django_db


@pytest.fixture
def beat(db):
    return WorkerHeartbeat.objects.create(worker="test:1", last_pass_at=timezone.now())


def test_healthz_answers_without_touching_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["X-Request-Id"].startswith("req_")


def test_readyz_ready_with_the_contracts_checks(client, beat, settings):
    settings.REDIS_URL = ""
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ready",
        "checks": {
            "database": "ok",
            "migrations": "ok",
            "redis": "not configured",
            "worker": "ok",
        },
    }
    assert response["Cache-Control"] == "no-store"


def test_readyz_503_without_a_worker_heartbeat(client, settings):
    settings.REDIS_URL = ""
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["worker"] == "no heartbeat"


def test_readyz_names_a_stale_heartbeat_with_its_age(client, settings):
    settings.REDIS_URL = ""
    settings.GAVEL_WORKER_STALE_SECONDS = 60
    WorkerHeartbeat.objects.create(
        worker="old:1", last_pass_at=timezone.now() - timedelta(seconds=95)
    )
    body = client.get("/readyz").json()
    assert body["status"] == "not ready"
    assert body["checks"]["worker"] in ("no heartbeat for 95 s", "no heartbeat for 96 s")


def test_readyz_redis_unreachable(client, beat, settings, monkeypatch):
    import weakref

    monkeypatch.setattr(checks, "_redis", weakref.WeakKeyDictionary())
    # A port nothing listens on (loopback): refused at once.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"].startswith("unreachable (")


def test_readyz_unapplied_migrations(client, beat, settings, monkeypatch):
    settings.REDIS_URL = ""
    monkeypatch.setattr(checks, "_leaves", [*checks.migration_leaves(), ("ops", "9999_future")])
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == "1 app(s) with unapplied migrations"


def test_readyz_database_unreachable(client, beat, settings, monkeypatch):
    from django.db import OperationalError

    settings.REDIS_URL = ""

    def down(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(checks.connection, "cursor", down)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unreachable (OperationalError)"


@pytest.mark.parametrize(
    ("flag", "why"), [("warming", "warming up"), ("draining", "shutting down")]
)
def test_readyz_not_ready_while_warming_or_draining(client, beat, settings, monkeypatch, flag, why):
    settings.REDIS_URL = ""
    monkeypatch.setattr(Lifecycle, flag, True)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["server"] == why
    assert client.get("/healthz").status_code == 200  # alive all the same


def test_metrics_404_without_a_token(client, settings):
    settings.GAVEL_METRICS_TOKEN = ""
    assert client.get("/metrics", headers={"Authorization": "Bearer x"}).status_code == 404


def test_metrics_needs_the_token(client, settings):
    settings.GAVEL_METRICS_TOKEN = "metrics-secret-token"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    response = client.get("/metrics", headers={"Authorization": "Bearer metrics-secret-token"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")


def _scrape(client) -> str:
    response = client.get("/metrics", headers={"Authorization": "Bearer metrics-secret-token"})
    assert response.status_code == 200
    return response.content.decode()


def _value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in:\n{text}")


def test_metrics_series_named_by_the_contract(client, settings, ingest_a, decide_a, beat, tenant_a):
    settings.GAVEL_METRICS_TOKEN = "metrics-secret-token"
    from tests.support.batches import approval_requested, new_run, step_events

    assert ingest_a.post("/api/v1/runs", new_run("run_m1")).status_code == 201
    before = _value(_scrape(client), "gavel_ingest_events_total")
    events = [*step_events(1, 1), approval_requested(4, "tc1")]
    answer = ingest_a.post("/api/v1/runs/run_m1/events", {"events": events})
    assert answer.status_code == 200, answer.content
    text = _scrape(client)
    assert _value(text, "gavel_ingest_events_total") == before + 4
    assert _value(text, "gavel_approvals_pending") == 1
    for kind in ("webhook", "slack"):
        assert _value(text, f'gavel_outbox_oldest_pending_seconds{{kind="{kind}"}}') == 0
    from notifications.models import OutboundEmail

    OutboundEmail.objects.create(
        tenant=tenant_a, to="x@a.example", subject="s", text_body="b",
        created_at=timezone.now() - timedelta(seconds=120),
    )  # fmt: skip
    aged = _value(_scrape(client), 'gavel_outbox_oldest_pending_seconds{kind="mail"}')
    assert 120 <= aged < 180
    assert _value(text, "gavel_worker_last_pass_timestamp_seconds") == pytest.approx(
        beat.last_pass_at.timestamp()
    )
    assert "gavel_websocket_connections" in text
    # the requests above, by route pattern and status class
    assert (
        'gavel_http_requests_total{method="POST",route="/api/v1/runs/<wire:run_id>/events",status="2xx"}'
        in text
    )
    assert "gavel_http_request_duration_seconds_bucket{" in text
    assert "run_m1" not in text  # no label holds a tenant's content

    approval = decide_a.get("/api/v1/approvals", status="pending").json()["items"][0]
    decided = decide_a.post(f"/api/v1/approvals/{approval['id']}/decision", {"decision": "approve"})
    assert decided.status_code == 200, decided.content
    text = _scrape(client)
    assert _value(text, 'gavel_approval_decision_seconds_count{decision="approved"}') >= 1
    assert _value(text, "gavel_approvals_pending") == 0


def test_request_id_kept_when_sane_else_replaced(client):
    kept = client.get("/healthz", headers={"X-Request-Id": "lb-1234.abc"})
    assert kept["X-Request-Id"] == "lb-1234.abc"
    replaced = client.get("/healthz", headers={"X-Request-Id": "bad id\nwith newline"})
    assert replaced["X-Request-Id"].startswith("req_")
    too_long = client.get("/healthz", headers={"X-Request-Id": "a" * 300})
    assert too_long["X-Request-Id"].startswith("req_")


def _json_lines():
    """A handler configured as settings.LOGGING's (its filters run as each line is written)."""
    import io

    from ops.logs import JsonFormatter, Redact, RequestId

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("%(message)s"))
    handler.addFilter(RequestId())
    handler.addFilter(Redact())
    return stream, handler


@pytest.fixture
def json_log():
    stream, handler = _json_lines()
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def test_request_id_on_every_response_and_every_log_line(client, ingest_a, json_log):
    response = ingest_a.get("/api/v1/runs/run_nope", headers={"X-Request-Id": "trace-77"})
    logging.getLogger("outside").info("no request here")
    assert response.status_code == 404
    assert response["X-Request-Id"] == "trace-77"
    lines = json_log()
    inside = [line for line in lines if line["logger"] == "django.request"]
    assert inside, lines
    for line in inside:
        assert line["request_id"] == "trace-77"
        assert {"time", "level", "logger", "message"} <= set(line)
    outside = next(line for line in lines if line["logger"] == "outside")
    assert "request_id" not in outside
    assert outside["level"] == "INFO"


def test_secrets_never_reach_a_log_line(json_log):
    log = logging.getLogger("gavel.test")
    log.info("posting to https://hooks.slack.com/services/T000/B000/XXXXSECRETXXXX now")
    log.info("header Authorization: Bearer gvl_abcdefghijklmnop1234 sent")
    log.info("url %s", "https://user:hunter2@example.com/hook?token=sekrit123")
    try:
        raise ValueError("key gvl_zyxwvutsrqponmlk9876 refused")
    except ValueError:
        log.exception("failed")
    text = json.dumps(json_log())
    for secret in ("XXXXSECRETXXXX", "gvl_abcdefghijklmnop1234", "hunter2", "sekrit123",
                   "gvl_zyxwvutsrqponmlk9876"):  # fmt: skip
        assert secret not in text
    assert "https://hooks.slack.com/[redacted]" in text


def test_api_500_uses_the_requests_id(client, ingest_a, monkeypatch):
    from runs import api as runs_api

    def boom(**kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(runs_api, "runs_list", boom)
    response = ingest_a.get("/api/v1/runs", headers={"X-Request-Id": "rid-500"})
    assert response.status_code == 500
    assert response["X-Request-Id"] == "rid-500"
    assert response.json()["error"]["details"]["requestId"] == "rid-500"
