"""Optional error reporting (Sentry) and tracing (OpenTelemetry), both off unless configured,
both optional extras (`pip install "gavel[sentry]"`, `"gavel[otel]"`).

- `SENTRY_DSN`: sentry-sdk with its Django integration; no personal data is sent
  (`send_default_pii=False`), request headers and bodies are scrubbed of credentials, and the
  event carries the request id (`request_id` tag) the client was given as `X-Request-Id`.
- `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): a span per HTTP
  request (ops/middleware.py), exported over OTLP/HTTP in batches, continuing an incoming W3C
  `traceparent`; `OTEL_SERVICE_NAME` (default "gavel") and the SDK's other `OTEL_*` variables
  apply. The trace ids a runtime reports on its events (`step.finished`'s `traceId`) are added
  to the ingest request's span as the attribute `gavel.runtime_trace_ids`, and as links when
  they are W3C `traceparent` values (`00-<trace id>-<span id>-<flags>`), so a run's spans in
  the runtime's tracing system and the console's ingest of them are joined.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re

log = logging.getLogger(__name__)

_tracer = None
# A W3C traceparent: version-trace_id-parent_id-flags.
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
SCRUBBED = "[scrubbed]"
_SECRET_HEADERS = {
    "authorization",
    "cookie",
    "x-csrftoken",
    "x-slack-signature",
    "proxy-authorization",
}


def setup() -> None:
    """Called once from settings: turn on what the environment configures."""
    dsn = os.environ.get("SENTRY_DSN", "").strip()
    if dsn:
        _setup_sentry(dsn)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        setup_tracing()


def _scrub_event(event, hint):
    request = event.get("request") or {}
    headers = request.get("headers") or {}
    for name in list(headers):
        if name.lower() in _SECRET_HEADERS:
            headers[name] = SCRUBBED
    if "data" in request:
        request["data"] = SCRUBBED
    if "query_string" in request:
        request["query_string"] = SCRUBBED
    from ops.context import request_id

    rid = request_id.get()
    if rid:
        event.setdefault("tags", {})["request_id"] = rid
    return event


def _setup_sentry(dsn: str) -> None:
    try:
        import sentry_sdk
        from sentry_sdk.integrations.django import DjangoIntegration
    except ImportError:
        log.error("SENTRY_DSN is set but sentry-sdk is not installed (pip install 'gavel[sentry]')")
        return
    sentry_sdk.init(
        dsn=dsn,
        integrations=[DjangoIntegration()],
        send_default_pii=False,
        environment=os.environ.get("SENTRY_ENVIRONMENT") or None,
        release=os.environ.get("SENTRY_RELEASE") or None,
        traces_sample_rate=float(os.environ.get("SENTRY_TRACES_SAMPLE_RATE", "0") or 0),
        before_send=_scrub_event,
    )


def setup_tracing(exporter=None) -> None:
    """The tracer: OTLP/HTTP from the environment, or `exporter` (tests: in memory)."""
    global _tracer
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        log.error("OTLP tracing is configured but opentelemetry-sdk is not installed (gavel[otel])")
        return
    name = os.environ.get("OTEL_SERVICE_NAME") or "gavel"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracer = provider.get_tracer("gavel")  # ours: the global provider is left alone


def teardown_tracing() -> None:
    global _tracer
    _tracer = None


def enabled() -> bool:
    return _tracer is not None


@contextlib.contextmanager
def request_span(*, method: str, headers: dict, request_id: str):
    """A server span around one request (a no-op when tracing is off). Yields a callable
    `finish(route, status)` that names the span after the route and sets its status."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind, Status, StatusCode

    context = extract({k.lower(): v for k, v in headers.items()})
    with _tracer.start_as_current_span(f"{method}", context=context, kind=SpanKind.SERVER) as span:
        span.set_attribute("http.request.method", method)
        span.set_attribute("gavel.request_id", request_id)

        def finish(route: str, status: int) -> None:
            span.update_name(f"{method} {route}")
            span.set_attribute("http.route", route)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))

        yield finish


def link_trace_ids(trace_ids: list[str]) -> None:
    """Join the runtime's trace ids to the current span (links and an attribute)."""
    if _tracer is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import SpanContext, TraceFlags

    span = trace.get_current_span()
    if not span.is_recording():
        return
    unique = list(dict.fromkeys(str(t)[:128] for t in trace_ids))[:32]
    span.set_attribute("gavel.runtime_trace_ids", unique)
    for value in unique:
        parent = _TRACEPARENT.fullmatch(value)
        if parent and int(parent[1], 16) and int(parent[2], 16):
            context = SpanContext(
                trace_id=int(parent[1], 16),
                span_id=int(parent[2], 16),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            span.add_link(context, {"gavel.link": "runtime trace"})
