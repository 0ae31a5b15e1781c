"""JSON log lines (python-json-logger): every line has `time` (UTC, ISO 8601), `level`,
`logger` and `message`, plus `request_id` on every line written while a request is served
(ops/middleware.py sets it; the client gets the same id as `X-Request-Id`), and the
traceback as `exc_info`. `LOG_FORMAT=text` gives the same fields as plain text (development).

Secrets never reach a line: `Redact` rewrites each record's message before any handler
formats it: Slack incoming-webhook URLs (the URL is the secret), credentials in URLs
(`user:password@`), query strings of outbound URLs (signed URLs carry tokens there),
`Authorization`/`Bearer`/`Basic` values, and the console's own API keys. httpx's per-request
INFO line (every webhook URL) is silenced in settings (its logger at WARNING).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from ops.context import request_id

REDACTED = "[redacted]"
_PATTERNS = [
    # Slack incoming webhooks and response_urls: the path is the credential.
    (re.compile(r"(https?://hooks\.slack(?:-gov)?\.com/)\S+", re.I), r"\1" + REDACTED),
    # user:password@ in any URL
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@", re.I), r"\1" + REDACTED + "@"),
    # query strings of URLs (tokens, signatures)
    (re.compile(r"(\bhttps?://[^\s?#\"']+)\?[^\s\"']*", re.I), r"\1?" + REDACTED),
    # Authorization headers and bearer / basic credentials
    (
        re.compile(r"(authorization[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+(\s+[^\s\"',}]+)?", re.I),
        r"\1" + REDACTED,
    ),
    (re.compile(r"\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}", re.I), r"\1 " + REDACTED),
    # the console's API keys (gvl_...) and Slack tokens (xox?-...)
    (re.compile(r"\bgvl_[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), REDACTED),
]


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class Redact(logging.Filter):
    """Secrets out of the record's message (and its traceback's text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to the formatter to report
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


class RequestId(logging.Filter):
    """The current request's id on the record (`request_id`, None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(_JsonFormatter):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("reserved_attrs", _RESERVED)
        super().__init__(*args, **kwargs)

    def add_fields(self, log_data, record, message_dict):
        super().add_fields(log_data, record, message_dict)
        log_data["time"] = datetime.fromtimestamp(record.created, UTC).isoformat(
            timespec="milliseconds"
        )
        log_data["level"] = record.levelname
        log_data["logger"] = record.name
        if getattr(record, "request_id", None):
            log_data["request_id"] = record.request_id
        else:
            log_data.pop("request_id", None)
        if "exc_info" in log_data:
            log_data["exc_info"] = redact(log_data["exc_info"])

    def process_log_record(self, log_data):
        # time, level, logger first: easy to read raw
        ordered = {k: log_data.pop(k) for k in ("time", "level", "logger") if k in log_data}
        ordered.update(log_data)
        return ordered


# Attributes of every LogRecord that are not extra fields (python-json-logger's list, plus
# the ones set here and by Django's request logging, whose `request` is an object).
_RESERVED = [
    *RESERVED_ATTRS,
    "request_id",
    "request",
    "status_code",
    "server_time",
    "color_message",
]


class TextFormatter(logging.Formatter):
    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")

    def formatException(self, ei):
        return redact(super().formatException(ei))


def config(*, level: str, fmt: str) -> dict:
    """settings.LOGGING."""
    if fmt not in ("json", "text"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("LOG_FORMAT must be json or text")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": "ops.logs.RequestId"},
            "redact": {"()": "ops.logs.Redact"},
        },
        "formatters": {
            "json": {"()": "ops.logs.JsonFormatter", "fmt": "%(message)s"},
            "text": {"()": "ops.logs.TextFormatter"},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": fmt,
                "filters": ["request_id", "redact"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.db.backends": {"level": "WARNING"},
            "httpx": {"level": "WARNING"},  # its INFO line is every outbound URL
            "httpcore": {"level": "WARNING"},
        },
    }
