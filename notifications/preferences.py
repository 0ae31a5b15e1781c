"""A principal's own notification settings: how it hears of new calls it may decide (mail now,
a digest, none), its Slack user id, browser notifications. One writer for the API and the
`/settings/` page, audited before → after in the same transaction.

A Slack member id typed in (`slackUserId`) is only a claim: anyone can type anyone's id, so a
claim never says who pressed a button in Slack. It becomes the principal's verified id only
through Slack: `slack_link_start` gives the principal a one-time code (shown once on its
settings page, valid 10 minutes, stored as a hash), and `slack_link_complete` runs when Slack
sends that code in a request it signed from the member (a slash command, `/gavel link CODE`,
notifications/slack_actions.py): the member who sent it is the one who holds the code. A
verified id is unique in the tenant (linking takes it away from any other principal)."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from console.core.errors import Conflict
from console.directory import access
from console.directory.services import audit
from console.models import ApiKey
from notifications.models import EmailChoice, NotificationSettings
from notifications.schemas import (
    SLACK_USER_ID_PATTERN,
    NotificationSettingsOut,
    notification_settings_resource,
)

LINK_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read off a screen
LINK_CODE_LENGTH = 12  # 60 bits, shown as XXXX-XXXX-XXXX
LINK_CODE_TTL = timedelta(minutes=10)


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
    user id typed in is an unverified claim (a changed one loses its verification); one that
    another principal of the tenant holds verified is a 409 `slack_user_taken`. When nothing
    changes, nothing is written or audited."""
    principal = access.own_principal(viewer=viewer)
    row, _ = NotificationSettings.objects.select_for_update().get_or_create(
        principal=principal, defaults={"tenant_id": principal.tenant_id}
    )
    before = notification_settings_resource(row)
    claimed = row.slack_user_id
    for name, value in fields.items():
        setattr(row, name, value)
    after = notification_settings_resource(row)
    if after == before:
        return row
    if row.slack_user_id != claimed:
        row.slack_user_verified = False  # typed in: a claim until Slack vouches for it
    others = NotificationSettings.objects.filter(tenant_id=principal.tenant_id).exclude(pk=row.pk)
    verified = others.filter(slack_user_id=row.slack_user_id, slack_user_verified=True)
    if row.slack_user_id and verified.exists():
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


# ---- linking a Slack member id, vouched for by Slack -------------------------------------------


def _code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def link_code_normalized(text: str) -> str | None:
    """The code as typed in Slack (any case, with or without dashes or spaces), or None when
    it cannot be one."""
    code = re.sub(r"[\s-]", "", text or "").upper()
    if len(code) != LINK_CODE_LENGTH or any(ch not in LINK_CODE_ALPHABET for ch in code):
        return None
    return code


@transaction.atomic
def slack_link_start(*, viewer) -> tuple[str, object]:
    """A new one-time code for the viewer's own principal to send from Slack (`/gavel link
    CODE`), and when it expires. Only its hash is kept; a new code replaces the last one."""
    principal = access.own_principal(viewer=viewer)
    row, _ = NotificationSettings.objects.select_for_update().get_or_create(
        principal=principal, defaults={"tenant_id": principal.tenant_id}
    )
    code = "".join(secrets.choice(LINK_CODE_ALPHABET) for _ in range(LINK_CODE_LENGTH))
    row.slack_link_code_hash = _code_hash(code)
    row.slack_link_expires_at = expires = timezone.now() + LINK_CODE_TTL
    row.save(update_fields=["slack_link_code_hash", "slack_link_expires_at"])
    audit(
        tenant=principal.tenant,
        action="notification_settings.slack_link_started",
        object_type="principal",
        object_id=principal.external_id,
        principal=principal,
        key=viewer if isinstance(viewer, ApiKey) else None,
        data={"expiresAt": expires.isoformat()},
    )
    return "-".join(code[i : i + 4] for i in range(0, LINK_CODE_LENGTH, 4)), expires


def slack_link_pending(*, code: str) -> NotificationSettings | None:
    """The settings (with tenant and principal) whose live link code this is, or None: how a
    Slack request that carries a code finds the tenant whose signing secret must verify it."""
    return (
        NotificationSettings.objects.filter(
            slack_link_code_hash=_code_hash(code),
            slack_link_expires_at__gt=timezone.now(),
            principal__is_active=True,
        )
        .select_related("tenant", "principal")
        .first()
    )


@transaction.atomic
def slack_link_complete(*, code: str, slack_user_id: str) -> NotificationSettings | None:
    """Slack vouched (a signed request of this member carried the code): the member id becomes
    the principal's verified one, taken from any other principal of the tenant that held or
    claimed it; the code is used up. None: the code is no longer live (used, expired)."""
    if not re.fullmatch(SLACK_USER_ID_PATTERN, slack_user_id or ""):
        return None
    row = (
        NotificationSettings.objects.select_for_update(of=("self",))
        .select_related("tenant", "principal")
        .filter(slack_link_code_hash=_code_hash(code), slack_link_expires_at__gt=timezone.now())
        .first()
    )
    if row is None or not row.principal.is_active:
        return None
    holders = NotificationSettings.objects.select_for_update(of=("self",)).filter(
        tenant_id=row.tenant_id, slack_user_id=slack_user_id
    )
    for other in holders.exclude(pk=row.pk).select_related("principal"):
        _slack_id_set(other, None, verified=False, by=row.principal)
    row.slack_link_code_hash = row.slack_link_expires_at = None
    _slack_id_set(row, slack_user_id, verified=True, by=row.principal)
    return row


def _slack_id_set(row: NotificationSettings, slack_user_id, *, verified: bool, by) -> None:
    before = {
        **_wire(notification_settings_resource(row)),
        "slackUserVerified": row.slack_user_verified,
    }
    row.slack_user_id, row.slack_user_verified = slack_user_id, verified
    row.updated_at = timezone.now()
    row.save()
    audit(
        tenant=row.tenant,
        action="notification_settings.updated",
        object_type="principal",
        object_id=row.principal.external_id,
        principal=by,
        before=before,
        after={**_wire(notification_settings_resource(row)), "slackUserVerified": verified},
        data={"via": "slack"},
    )
