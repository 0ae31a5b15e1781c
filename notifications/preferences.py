"""A principal's own notification settings: how it hears of new calls it may decide (mail now,
a digest, none), its Slack user id, browser notifications. One writer for the API and the
`/settings/` page, audited before → after in the same transaction."""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from console import access
from console.errors import Conflict
from console.models import ApiKey
from console.services import audit
from notifications.models import EmailChoice, NotificationSettings
from notifications.schemas import NotificationSettingsOut, notification_settings_resource


def _slack_taken(row: NotificationSettings) -> Conflict:
    return Conflict(
        f"the Slack user '{row.slack_user_id}' is another principal's in this tenant",
        code="slack_user_taken",
        details={"slackUserId": row.slack_user_id},
    )


def _schedule_digest(row: NotificationSettings, before: dict, now) -> None:
    """Switching to the digest (or changing its interval) starts its clock now; the first
    digest lists what is requested from now on."""
    if row.email != EmailChoice.DIGEST:
        row.next_digest_at = None
        return
    if before["email"] != EmailChoice.DIGEST:
        row.digest_through = now
    if before["email"] != EmailChoice.DIGEST or before["digest_minutes"] != row.digest_minutes:
        row.next_digest_at = now + timedelta(minutes=row.digest_minutes)


@transaction.atomic
def notification_settings_update(*, viewer, fields: dict) -> NotificationSettings:
    """Change the viewer's own settings (`fields`: wire-validated snake_case values). A Slack
    user id another principal of the tenant holds is a 409 `slack_user_taken`. When nothing
    changes, nothing is written or audited."""
    principal = access.own_principal(viewer=viewer)
    row, _ = NotificationSettings.objects.select_for_update().get_or_create(
        principal=principal, defaults={"tenant_id": principal.tenant_id}
    )
    before = notification_settings_resource(row)
    for name, value in fields.items():
        setattr(row, name, value)
    after = notification_settings_resource(row)
    if after == before:
        return row
    others = NotificationSettings.objects.filter(tenant_id=principal.tenant_id).exclude(pk=row.pk)
    if row.slack_user_id and others.filter(slack_user_id=row.slack_user_id).exists():
        raise _slack_taken(row)
    row.updated_at = now = timezone.now()
    _schedule_digest(row, before, now)
    try:
        with transaction.atomic():  # two principals claiming one Slack id at once
            row.save()
    except IntegrityError:
        raise _slack_taken(row) from None
    audit(
        tenant=principal.tenant,
        action="notification_settings.updated",
        object_type="principal",
        object_id=principal.external_id,
        principal=principal,
        key=viewer if isinstance(viewer, ApiKey) else None,
        before=_wire(before),
        after=_wire(after),
    )
    return row


def _wire(resource: dict) -> dict:
    """The settings as the API shows them (camelCase), for the audit log."""
    return NotificationSettingsOut.model_validate(resource).model_dump(by_alias=True)
