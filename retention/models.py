"""A tenant's retention policy: how many days each kind of data is kept (null: forever).

The audit log's retention stays `Tenant.audit_retention_days` (the contract's
`auditRetentionDays` of GET|PATCH /tenant); the other kinds are here. A tenant without a row
has the defaults below."""

from django.db import models

from console.models import Tenant

DEFAULTS = {
    "run_days": None,  # runs, their events, messages, tool results, approvals: forever
    "sent_mail_days": 30,  # sent (or given up) mail, bodies included
    "webhook_delivery_days": 30,  # delivered (or given up) webhook deliveries, Slack responses
    "read_notification_days": 90,  # notifications read this long ago
}


class RetentionPolicy(models.Model):
    tenant = models.OneToOneField(
        Tenant, primary_key=True, on_delete=models.CASCADE, related_name="retention_policy"
    )
    run_days = models.PositiveIntegerField(null=True, blank=True, default=None)
    sent_mail_days = models.PositiveIntegerField(null=True, blank=True, default=30)
    webhook_delivery_days = models.PositiveIntegerField(null=True, blank=True, default=30)
    read_notification_days = models.PositiveIntegerField(null=True, blank=True, default=90)
    # When the pruner last signed a checkpoint that moved the audit chain's pruned prefix.
    audit_cut_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"retention of tenant {self.tenant_id}"
