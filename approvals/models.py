"""Held tool calls and the decisions on them."""

import secrets

from django.db import models
from django.utils import timezone

from approvals.rules import RuleSpec
from console.models import ApiKey, Principal, Tenant
from runs.models import Run


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# The statuses a runtime reads as a decision (a cancelled call was never decided).
DECIDED = (ApprovalStatus.APPROVED, ApprovalStatus.DENIED, ApprovalStatus.EXPIRED)


def new_approval_id() -> str:
    return "apr_" + secrets.token_hex(12)


def new_delivery_id() -> str:
    return "whd_" + secrets.token_hex(12)


def new_rule_id() -> str:
    return "rul_" + secrets.token_hex(12)


class RuleEffect(models.TextChoices):
    APPROVE = "approve"
    DENY = "deny"


def _no_examples() -> dict:
    return {"match": [], "noMatch": []}


class Rule(models.Model):
    """A lasting decision: calls it matches are decided the moment they are requested.

    Never deleted: deactivating keeps it (and the decisions it made) listed. Matching is
    approvals/rules/'s (pure); the writes are approvals/services/rules.py's."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rules")
    public_id = models.CharField(max_length=32, unique=True, default=new_rule_id)
    name = models.CharField(max_length=200)
    effect = models.CharField(max_length=16, choices=RuleEffect.choices)
    tool_pattern = models.CharField(max_length=255, default="*")  # fnmatch, case-sensitive
    agent_pattern = models.CharField(max_length=255, default="*")
    principal_pattern = models.CharField(max_length=255, default="*")
    # Narrowing to one conversation or one run, by wire id (the run need not exist yet).
    conversation_external_id = models.CharField(max_length=255, null=True, blank=True)
    run_external_id = models.CharField(max_length=128, null=True, blank=True)
    conditions = models.JSONField(default=list)  # [{"path", "op", "value"?}], at most 20
    message = models.TextField(null=True, blank=True)  # a deny rule's: what the model reads
    expires_at = models.DateTimeField(null=True, blank=True)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="rules_made"
    )
    # Every other principal who changed it since (a PATCH or the editor's save). The rule is
    # theirs too: it never decides their own runs (four-eyes), and it decides a call only
    # while each of them, and its creator, may decide that tool (approvals/services/rules.py).
    editors = models.ManyToManyField(Principal, blank=True, related_name="rules_edited")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    hits = models.PositiveBigIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    examples = models.JSONField(default=_no_examples)  # {"match": [args], "noMatch": [args]}

    class Meta:
        indexes = [models.Index(fields=["tenant", "active"], name="rule_tenant_active")]
        ordering = ["created_at", "id"]

    def __str__(self):
        return self.public_id

    def spec(self) -> RuleSpec:
        """What matching needs (approvals/rules/); select_related `created_by` and
        prefetch `editors` for lists."""
        return RuleSpec(
            id=self.public_id,
            effect=self.effect,
            tool_pattern=self.tool_pattern,
            agent_pattern=self.agent_pattern,
            principal_pattern=self.principal_pattern,
            conversation_id=self.conversation_external_id,
            run_id=self.run_external_id,
            conditions=list(self.conditions or []),
            message=self.message,
            expires_at=self.expires_at,
            active=self.active,
            creator_key=self.created_by_id,
            creator_id=self.created_by.external_id if self.created_by_id else None,
            editors=tuple((p.pk, p.external_id) for p in self.editors.all()),
            source=self,
        )


class RuleVersion(models.Model):
    """A tenant's rules version: bumped in every rule write's transaction and read once per
    `approval.requested` batch, so each process knows when its compiled rules are stale."""

    tenant = models.OneToOneField(
        Tenant, primary_key=True, on_delete=models.CASCADE, related_name="rule_version"
    )
    version = models.PositiveBigIntegerField(default=0)


# What deciding or expiring a held call never reads of its run: the runtime's snapshot and the
# other JSON a run carries (a long conversation's snapshot is hundreds of KB; read and parsed
# with every decision, it cost a decision of a 1 MB run ~10 ms).
RUN_UNREAD = (
    "snapshot", "admission", "input", "result", "todos", "usage_by_model", "limits",
    "taint_summary", "promoted_tools", "usage_denied", "error",
)  # fmt: skip


class ApprovalQuerySet(models.QuerySet):
    def with_run(self):
        """`run` and its tenant read in the same query, without the run's RUN_UNREAD (loaded
        on first use, should anything ask)."""
        return self.select_related("run", "run__tenant").defer(
            *(f"run__{name}" for name in RUN_UNREAD)
        )


class Approval(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approvals")
    public_id = models.CharField(max_length=32, unique=True, default=new_approval_id)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    step = models.PositiveIntegerField(null=True, blank=True)
    position = models.PositiveIntegerField(default=0)  # request order within the run
    tool_call_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    arguments = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    rejection_message = models.TextField(blank=True)
    sub_run_tool_call_id = models.CharField(max_length=255, null=True, blank=True)
    # A parent's approval that mirrors a parked child's call: deciding one decides both.
    mirror_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="mirrors"
    )
    status = models.CharField(
        max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    requested_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    decided_by = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="decisions"
    )
    decided_via_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField(null=True, blank=True)  # what the model reads on deny/expiry
    decided_arguments = models.JSONField(null=True, blank=True)  # approve: the ones to run
    # Monotonic cursor of decisions (for `after=`), assigned when decided.
    decision_seq = models.PositiveBigIntegerField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)  # the runtime's pickup
    # A reviewer may extend a pending approval once, in its last minute.
    extended_at = models.DateTimeField(null=True, blank=True)
    extended_by = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # A call a lasting rule decided the moment it was requested (decided_by is then null).
    decided_by_rule = models.ForeignKey(
        "Rule", null=True, blank=True, on_delete=models.PROTECT, related_name="decisions"
    )

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="approval_unique_call")
        ]
        indexes = [
            models.Index(fields=["tenant", "status", "requested_at"], name="approval_inbox"),
            models.Index(fields=["status", "expires_at"], name="approval_expiry"),
            models.Index(fields=["run", "status"], name="approval_run_status"),
            models.Index(fields=["run", "decision_seq"], name="approval_run_decisions"),
            # History reads (rule previews, suggestions, decision analytics).
            models.Index(fields=["tenant", "requested_at"], name="approval_tenant_requested"),
            models.Index(fields=["tenant", "decided_at"], name="approval_tenant_decided"),
        ]
        ordering = ["requested_at", "position", "id"]

    def __str__(self):
        return self.public_id

    @property
    def is_pending(self) -> bool:
        return self.status == ApprovalStatus.PENDING


class WebhookEvent(models.TextChoices):
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_DECIDED = "approval.decided"
    APPROVAL_REMINDER = "approval.reminder"
    APPROVAL_ESCALATED = "approval.escalated"
    BUDGET_THRESHOLD_CROSSED = "budget.threshold_crossed"


class WebhookFormat(models.TextChoices):
    GAVEL = "gavel"  # the signed JSON body (docs/api.md)
    SLACK = "slack"  # Slack Block Kit for an incoming-webhook URL (its body: issue 16)


def new_webhook_id() -> str:
    return "whk_" + secrets.token_hex(12)


class Webhook(models.Model):
    """An HTTPS endpoint of a tenant that hears about approvals, budgets and reminders
    (HMAC-SHA256 signed)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhooks")
    public_id = models.CharField(max_length=32, unique=True, default=new_webhook_id)
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=128)  # the signing key, shown once at creation
    events = models.JSONField(default=list)  # subset of WebhookEvent values
    format = models.CharField(
        max_length=16, choices=WebhookFormat.choices, default=WebhookFormat.GAVEL
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return self.url


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its (next) attempt
    DELIVERED = "delivered"  # the endpoint answered 2xx
    FAILED = "failed"  # gave up after the last attempt


class WebhookDelivery(models.Model):
    """One event for one endpoint, with every attempt's outcome summarised."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=64)
    delivery_id = models.CharField(max_length=40, unique=True, default=new_delivery_id)
    payload = models.JSONField()
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="webhook_due")]
        ordering = ["created_at", "id"]


def new_saved_view_id() -> str:
    return "dsv_" + secrets.token_hex(12)


class SavedView(models.Model):
    """A reviewer's own named filter set of the desk (/approvals/): the built-in view and the
    tool, agent, principal and run filters, as `selectors_desk.desk_filters` reads them. One
    principal's, in one tenant (approvals/access.py scopes every read and write)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="desk_views")
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="desk_views")
    public_id = models.CharField(max_length=32, unique=True, default=new_saved_view_id)
    name = models.CharField(max_length=80)
    filters = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "principal", "name"], name="desk_view_unique_name"
            )
        ]
        ordering = ["name", "id"]

    def __str__(self):
        return self.name
