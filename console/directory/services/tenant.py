"""The tenant's settings (GET|PATCH /api/v1/tenant, /manage/settings/): one audited write.

Who reads them reads the row each time (approval expiry, self-approval, the currency on
pages), so a change takes effect with the next request. The usage rollups are kept by the
tenant-local day: a time zone change announces `tenant_time_zone_changed` inside the same
transaction, and runs rebuilds the rollups there (runs/services/usage.py), so no reader
ever sees days of the old zone under the new one."""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal

from console.directory import access
from console.directory.services import audit
from console.directory.services.wire import actor_fields
from console.models import Tenant

# Sent inside the changing transaction with `tenant` (the row as changed).
tenant_time_zone_changed = Signal()

FIELDS = (
    "name",
    "allow_self_approval",
    "approval_ttl_seconds",
    "reminder_after_seconds",
    "escalate_after_seconds",
    "currency",
    "time_zone",
    "slack_decisions",
    "audit_retention_days",
)


def tenant_settings(tenant: Tenant) -> dict:
    """The settings' wire form (camelCase; the audit row's before/after). Never the Slack
    signing secret itself: only whether one is set."""
    return {
        "slug": tenant.slug,
        "name": tenant.name,
        "allowSelfApproval": tenant.allow_self_approval,
        "approvalTtlSeconds": tenant.approval_ttl_seconds,
        "reminderAfterSeconds": tenant.reminder_after_seconds,
        "escalateAfterSeconds": tenant.escalate_after_seconds,
        "currency": tenant.currency,
        "timeZone": tenant.time_zone,
        "slackSigningSecretSet": bool(tenant.slack_signing_secret),
        "slackDecisions": tenant.slack_decisions,
        "auditRetentionDays": tenant.audit_retention_days,
    }


@transaction.atomic
def tenant_update(*, viewer, fields: dict) -> Tenant:
    """Change the given settings (snake_case, validated by
    console.directory.schemas.keys.TenantPatch) of the viewer's tenant, locked meanwhile.
    Nothing changed: nothing written or audited. Audited `tenant.updated` with before → after."""
    access.require_capability(viewer, "admin")
    tenant = Tenant.objects.select_for_update().get(pk=viewer.tenant_id)
    before = tenant_settings(tenant)
    old_secret = tenant.slack_signing_secret
    for name in FIELDS:
        if name in fields:
            setattr(tenant, name, fields[name])
    if "slack_signing_secret" in fields:
        tenant.slack_signing_secret = fields["slack_signing_secret"] or ""
    secret_changed = tenant.slack_signing_secret != old_secret
    after = tenant_settings(tenant)
    if after == before and not secret_changed:
        return tenant
    tenant.save()
    data = {"slackSigningSecretChanged": True} if secret_changed else None
    audit(
        tenant=tenant,
        action="tenant.updated",
        object_type="tenant",
        object_id=tenant.slug,
        data=data,
        before=before,
        after=after,
        **actor_fields(viewer),
    )
    if after["timeZone"] != before["timeZone"]:
        tenant_time_zone_changed.send(sender=Tenant, tenant=tenant)
    return tenant
