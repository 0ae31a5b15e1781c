"""What the console tells people: in-console notifications, and the durable mail outbox."""

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
