"""The database's figures for `/metrics`, read at scrape time (three indexed reads): pending
approvals, the age of each outbox's oldest pending row, the workers' last pass."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from django.db import connection
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

OUTBOXES = ("mail", "webhook", "slack")


def _statement() -> tuple[str, list]:
    """One statement, one round trip: pending calls, each outbox's oldest pending row, the
    freshest heartbeat (every value a parameter, every name from the models)."""
    from approvals.models import Approval, ApprovalStatus, DeliveryStatus, WebhookDelivery
    from notifications.models import EmailState, OutboundEmail, SlackResponse, SlackResponseStatus
    from ops.models import WorkerHeartbeat

    def table(model) -> str:
        return connection.ops.quote_name(model._meta.db_table)

    sql = (
        f"SELECT (SELECT count(*) FROM {table(Approval)} WHERE status = %s), "  # noqa: S608
        f"(SELECT min(created_at) FROM {table(OutboundEmail)} WHERE state = %s), "
        f"(SELECT min(created_at) FROM {table(WebhookDelivery)} WHERE status = %s), "
        f"(SELECT min(created_at) FROM {table(SlackResponse)} WHERE status = %s), "
        f"(SELECT max(last_pass_at) FROM {table(WorkerHeartbeat)})"
    )
    params = [
        ApprovalStatus.PENDING.value,
        EmailState.PENDING.value,
        DeliveryStatus.PENDING.value,
        SlackResponseStatus.PENDING.value,
    ]
    return sql, params


def _aware(value):
    if isinstance(value, str):  # SQLite answers text
        value = datetime.fromisoformat(value)
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


class DatabaseCollector:
    def collect(self):
        sql, params = _statement()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            pending_count, *oldest_rows, last = cursor.fetchone()
        now = timezone.now()

        pending = GaugeMetricFamily(
            "gavel_approvals_pending", "Calls waiting for a person's decision (all tenants)"
        )
        pending.add_metric([], pending_count)
        yield pending

        oldest = GaugeMetricFamily(
            "gavel_outbox_oldest_pending_seconds",
            "Age of the oldest row not yet sent (0: none pending)",
            labels=["kind"],
        )
        for kind, first in zip(OUTBOXES, oldest_rows, strict=True):
            first = _aware(first)
            oldest.add_metric([kind], 0.0 if first is None else (now - first).total_seconds())
        yield oldest

        passed = GaugeMetricFamily(
            "gavel_worker_last_pass_timestamp_seconds",
            "When a worker last finished a pass (Unix time; 0: never)",
        )
        last = _aware(last)
        passed.add_metric([], last.timestamp() if last is not None else 0.0)
        yield passed


_database = DatabaseCollector()
_registry = None


def registry():
    """The process's registry (with the database's figures), or in prometheus-client's
    multiprocess mode (PROMETHEUS_MULTIPROC_DIR) one summing the host's processes."""
    global _registry
    if _registry is None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            _registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(_registry)
        else:
            _registry = REGISTRY
        _registry.register(_database)
    return _registry
