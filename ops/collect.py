"""The database's figures for `/metrics`, read at scrape time (three indexed reads): pending
approvals, the age of each outbox's oldest pending row, the workers' last pass."""

from __future__ import annotations

import os

from django.db.models import Min
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

OUTBOXES = ("mail", "webhook", "slack")


def _outboxes():
    from approvals.models import DeliveryStatus, WebhookDelivery
    from notifications.models import EmailState, OutboundEmail, SlackResponse, SlackResponseStatus

    return {
        "mail": OutboundEmail.objects.filter(state=EmailState.PENDING),
        "webhook": WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING),
        "slack": SlackResponse.objects.filter(status=SlackResponseStatus.PENDING),
    }


class DatabaseCollector:
    def collect(self):
        from approvals.models import Approval, ApprovalStatus
        from ops.models import WorkerHeartbeat

        now = timezone.now()
        pending = GaugeMetricFamily(
            "gavel_approvals_pending", "Calls waiting for a person's decision (all tenants)"
        )
        pending.add_metric([], Approval.objects.filter(status=ApprovalStatus.PENDING).count())
        yield pending

        oldest = GaugeMetricFamily(
            "gavel_outbox_oldest_pending_seconds",
            "Age of the oldest row not yet sent (0: none pending)",
            labels=["kind"],
        )
        for kind, rows in _outboxes().items():
            first = rows.aggregate(first=Min("created_at"))["first"]
            oldest.add_metric([kind], 0.0 if first is None else (now - first).total_seconds())
        yield oldest

        last = WorkerHeartbeat.objects.order_by("-last_pass_at").values_list(
            "last_pass_at", flat=True
        )[:1]
        passed = GaugeMetricFamily(
            "gavel_worker_last_pass_timestamp_seconds",
            "When a worker last finished a pass (Unix time; 0: never)",
        )
        passed.add_metric([], last[0].timestamp() if last else 0.0)
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
