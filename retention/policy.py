"""A tenant's retention policy over the wire (GET|PATCH /api/v1/retention, /manage/settings/):
one audited write, `retention.updated` with before → after. `auditDays` is the tenant's
`auditRetentionDays` (GET|PATCH /tenant shows and sets the same value)."""

from __future__ import annotations

from django.db import transaction

from console.audit.log import audit
from console.directory import access
from console.directory.services.wire import actor_fields
from console.models import Tenant
from retention.models import DEFAULTS, RetentionPolicy

MIN_DAYS, MAX_DAYS = 1, 3650
WIRE = {
    "run_days": "runDays",
    "sent_mail_days": "sentMailDays",
    "webhook_delivery_days": "webhookDeliveryDays",
    "read_notification_days": "readNotificationDays",
    "audit_days": "auditDays",
}


def retention_settings(tenant: Tenant) -> dict:
    """The policy's wire form (days per kind, null: forever)."""
    row = RetentionPolicy.objects.filter(tenant_id=tenant.pk).first()
    values = {name: getattr(row, name) if row else DEFAULTS[name] for name in DEFAULTS}
    values["audit_days"] = tenant.audit_retention_days
    return {WIRE[name]: value for name, value in values.items()}


@transaction.atomic
def retention_update(*, viewer, fields: dict) -> Tenant:
    """Change any of the policy's days (snake_case names of WIRE, validated by the caller's
    schema: 1..3650 or None). Nothing changed: nothing written or audited."""
    access.require_capability(viewer, "admin")
    tenant = Tenant.objects.select_for_update().get(pk=viewer.tenant_id)
    before = retention_settings(tenant)
    policy, _ = RetentionPolicy.objects.get_or_create(tenant=tenant)
    for name in DEFAULTS:
        if name in fields:
            setattr(policy, name, fields[name])
    if "audit_days" in fields:
        tenant.audit_retention_days = fields["audit_days"]
    policy.save()
    tenant.save(update_fields=["audit_retention_days"])
    after = retention_settings(tenant)
    if after != before:
        audit(
            tenant=tenant,
            action="retention.updated",
            object_type="tenant",
            object_id=tenant.slug,
            before=before,
            after=after,
            **actor_fields(viewer),
        )
    return tenant
