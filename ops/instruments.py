"""The process's Prometheus instruments (prometheus-client), and the one-line hooks the apps
call. No label holds a tenant's content: routes are URL patterns, never paths.

Each server process counts its own requests, sockets, ingested events and decisions, and
serves them on its own `/metrics` (scrape every server, not the balancer's address). With
PROMETHEUS_MULTIPROC_DIR set (prometheus-client's multiprocess mode: one directory per host,
emptied before the processes start) every process's `/metrics` serves the sum of all of the
host's processes instead. The database's figures (pending approvals, outbox age, the worker's
last pass) are read at scrape time and are the same from every process."""

from __future__ import annotations

import atexit
import logging
import os

from prometheus_client import Counter, Gauge, Histogram

log = logging.getLogger(__name__)

# Decision time spans seconds to days: a human reads the call.
DECISION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600, 7 * 86400)

HTTP_REQUESTS = Counter(
    "gavel_http_requests",
    "HTTP requests answered, by route (URL pattern) and status class",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "gavel_http_request_duration_seconds",
    "Time to answer an HTTP request (to the response's headers), by route and status class",
    ["method", "route", "status"],
    # Long-polls hold up to 30 s.
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
WEBSOCKETS = Gauge(
    "gavel_websocket_connections",
    "Open WebSocket connections on this process",
    multiprocess_mode="livesum",
)
INGEST_EVENTS = Counter("gavel_ingest_events", "Run events ingested (new, not replayed)")
DECISION_SECONDS = Histogram(
    "gavel_approval_decision_seconds",
    "Time from a call's request to a person's decision",
    ["decision"],
    buckets=DECISION_BUCKETS,
)


def events_ingested(events) -> None:
    """Runs' new events (runs/services/ingest.py). Their runtimes' trace ids are attached to
    the request's span when OpenTelemetry is on (ops/telemetry.py)."""
    INGEST_EVENTS.inc(len(events))
    trace_ids = [t for e in events if (t := getattr(e, "trace_id", None))]
    if trace_ids:
        from ops import telemetry

        telemetry.link_trace_ids(trace_ids)


def approval_decided(approval) -> None:
    """A person's decision (approvals/services/decisions.py)."""
    if approval.decided_at is None or approval.requested_at is None:
        return
    seconds = (approval.decided_at - approval.requested_at).total_seconds()
    DECISION_SECONDS.labels(approval.status).observe(max(0.0, seconds))


def _gone() -> None:
    """Multiprocess mode: this process's live gauges (open sockets) stop counting."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(os.getpid())


if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    atexit.register(_gone)
