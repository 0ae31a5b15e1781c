"""What the console tells people: in-console notifications, and the durable mail outbox."""

from __future__ import annotations

import secrets

from django.db import models
from django.utils import timezone

from console.models import Principal, Tenant


class NotificationKind(models.TextChoices):
    BUDGET_THRESHOLD_CROSSED = "budget.threshold_crossed", "Budget"
    APPROVAL_REMINDER = "approval.reminder", "Reminder"
    APPROVAL_ESCALATED = "approval.escalated", "Escalated"


def new_notification_id() -> str:
    return "ntf_" + secrets.token_hex(12)


class Notification(models.Model):
    """One message for one principal: the bell's count, `/notifications/`, the API."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="notifications")
    public_id = models.CharField(max_length=32, unique=True, default=new_notification_id)
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=64, choices=NotificationKind.choices)
    at = models.DateTimeField(default=timezone.now)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=1000)  # absolute (console.links.public_url)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["principal", "-at", "-id"], name="notification_feed"),
            models.Index(
                fields=["principal"],
                condition=models.Q(read_at__isnull=True),
                name="notification_unread",
            ),
        ]
        ordering = ["-at", "-id"]

    def __str__(self):
        return self.public_id

    @property
    def is_read(self) -> bool:
        return self.read_at is not None


class EmailState(models.TextChoices):
    PENDING = "pending"  # waiting for its (next) attempt
    SENT = "sent"  # the mail server took it
    FAILED = "failed"  # gave up after the last attempt


class OutboundEmail(models.Model):
    """One mail to one address, written in the transaction of what it reports and sent after
    commit (console/outbox.py), with every attempt's outcome summarised."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="emails")
    notification = models.ForeignKey(
        Notification, null=True, blank=True, on_delete=models.SET_NULL, related_name="emails"
    )
    to = models.EmailField(max_length=254)
    subject = models.CharField(max_length=255)
    text_body = models.TextField()
    html_body = models.TextField(blank=True)
    state = models.CharField(max_length=16, choices=EmailState.choices, default=EmailState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="email_due")]
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"{self.to}: {self.subject}"


class EmailChoice(models.TextChoices):
    """How a principal hears by mail of new calls it may decide."""

    NOW = "now"  # one mail per batch of new calls (one per request that held them)
    DIGEST = "digest"  # one mail every `digest_minutes` listing what is still pending
    OFF = "off"


DIGEST_MINUTES_MIN = 5
DIGEST_MINUTES_MAX = 1440
DIGEST_MINUTES_DEFAULT = 30


class NotificationSettings(models.Model):
    """One principal's choices (`/settings/`, `/api/v1/me/notification-settings`). A principal
    without a row has the defaults: no mail of new calls, browser notifications on."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    principal = models.OneToOneField(
        Principal, on_delete=models.CASCADE, related_name="notification_settings"
    )
    email = models.CharField(max_length=8, choices=EmailChoice.choices, default=EmailChoice.OFF)
    digest_minutes = models.PositiveIntegerField(default=DIGEST_MINUTES_DEFAULT)
    # The Slack member id. Typed in by the principal it is only a claim (`verified` false) and
    # never says who pressed a button in Slack; it is verified (and then unique in the tenant)
    # only by a request Slack signed from that member carrying the principal's one-time link
    # code (notifications/preferences.py `slack_link_*`).
    slack_user_id = models.CharField(max_length=32, null=True, blank=True)
    slack_user_verified = models.BooleanField(default=False)
    slack_link_code_hash = models.CharField(max_length=64, null=True, blank=True, unique=True)
    slack_link_expires_at = models.DateTimeField(null=True, blank=True)
    browser = models.BooleanField(default=True)
    # The digest: it lists the calls requested after `digest_through`; next one at this time.
    digest_through = models.DateTimeField(null=True, blank=True)
    next_digest_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "slack_user_id"],
                condition=models.Q(slack_user_id__isnull=False, slack_user_verified=True),
                name="notification_settings_unique_verified_slack_user",
            )
        ]
        indexes = [
            models.Index(
                fields=["next_digest_at"],
                condition=models.Q(email="digest"),
                name="notification_digest_due",
            )
        ]

    def __str__(self):
        return f"{self.principal_id}: {self.email}"

    @classmethod
    def of(cls, principal) -> NotificationSettings:
        """The principal's settings (the defaults, unsaved, when it never chose)."""
        row = cls.objects.filter(principal=principal).first()
        return row or cls(tenant_id=principal.tenant_id, principal=principal)


class CallBatch(models.Model):
    """The calls one request left to a human (approvals_request writes it in its own
    transaction): the "now" mail's durable to-do. The sender turns it into one mail per
    recipient after commit and stamps `mailed_at` in the same transaction."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    approval_ids = models.JSONField()  # Approval primary keys (no FK: models do not cross)
    created_at = models.DateTimeField(default=timezone.now)
    mailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=models.Q(mailed_at__isnull=True),
                name="call_batch_due",
            )
        ]


class ApprovalNotice(models.Model):
    """A reminder or an escalation that fired for one call: the unique row is the claim, so
    each fires once per call however many sweeps run at once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    approval = models.ForeignKey("approvals.Approval", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=32)  # approval.reminder | approval.escalated
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["approval", "kind"], name="approval_notice_once")
        ]


class SlackResponseStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its (next) attempt
    DELIVERED = "delivered"  # Slack answered 2xx
    FAILED = "failed"  # gave up after the last attempt


class SlackResponse(models.Model):
    """The updated message of an approval decided from Slack, for the press's `response_url`
    (how Slack replaces an interactive message): an outbox row, sent after commit by the
    server's outbox thread (and the sweep), retried on the outbox schedule."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=1000)
    body = models.JSONField()
    status = models.CharField(
        max_length=16, choices=SlackResponseStatus.choices, default=SlackResponseStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="slack_response_due")]
