"""The MCP gateway's rows: a tenant's upstream servers, the MCP sessions clients open through
the gateway (in the database, so any server process continues one), and each `tools/call`
(its held approval, its canonical arguments for re-attachment, whether it went upstream)."""

import secrets

from django.db import connections, models
from django.utils import timezone

from approvals.models import Approval
from console.models import ApiKey, Principal, Tenant
from runs.models import Run


class Transport(models.TextChoices):
    HTTP = "http"
    STDIO = "stdio"  # the operator's only (create_mcp_server --stdio), never a tenant's


class McpServer(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=40)  # [a-z0-9-]{1,40}, unique in the tenant
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.HTTP)
    url = models.TextField(blank=True)
    # {"Header": "value"} as JSON, Fernet-encrypted (console/core/crypto.py); write-only on the wire
    headers_encrypted = models.TextField(blank=True)
    header_names = models.JSONField(default=list)  # what the console may show
    command = models.JSONField(default=list)  # stdio: [COMMAND, ARG, ...]
    pass_read_only = models.BooleanField(default=False)
    hold_seconds = models.PositiveIntegerField(default=240)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcp_server_name_unique")
        ]
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.transport})"


def new_session_id() -> str:
    return secrets.token_hex(16)


class McpSession(models.Model):
    """One MCP session (`Mcp-Session-Id`) = one Gavel run."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="sessions")
    public_id = models.CharField(max_length=64, unique=True, default=new_session_id)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="+")
    key = models.ForeignKey(ApiKey, null=True, on_delete=models.SET_NULL, related_name="+")
    protocol_version = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # the last request of the session (written at most every few seconds, and with each
    # call's record): the idle limit (GAVEL_MCP_SESSION_IDLE_SECONDS) counts from it
    last_used_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)
    close_reason = models.CharField(max_length=32, blank=True)  # "deleted", "idle"
    # closed, its run left open while a call waits or is still to be recorded (the sweep
    # finishes the run once none does)
    finishing = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(
                fields=["last_used_at"],
                condition=models.Q(closed_at__isnull=True),
                name="mcp_session_open_used",
            ),
            models.Index(
                fields=["closed_at"],
                condition=models.Q(finishing=True),
                name="mcp_session_finishing",
            ),
        ]


class CallState(models.TextChoices):
    HELD = "held"  # recorded; waiting for (or holding) its decision
    FORWARDING = "forwarding"  # claimed: on its way upstream (at most once)
    DONE = "done"  # the upstream's result (or the refusal) is recorded
    REFUSED = "refused"  # denied or expired: nothing went upstream


class McpCallQuerySet(models.QuerySet):
    def record_many(self, calls: list, *, state: str, finished_at, recorded: bool) -> int:
        """Each call's `step`, `approval` and `result` as the objects hold them, and one
        `state`, `finished_at` and `recorded` for all, in one UPDATE from a VALUES list (SQL,
        which PostgreSQL and SQLite both run): the ORM's bulk_update builds a CASE per column
        and row, ~2.5 ms of Python a call in a write-behind batch of 100."""
        if not calls:
            return 0
        connection = connections[self.db]
        quote = connection.ops.quote_name
        meta = self.model._meta
        table = quote(meta.db_table)
        step, approval, result, state_, finished_, recorded_ = (
            meta.get_field(name)
            for name in ("step", "approval", "result", "state", "finished_at", "recorded")
        )
        json_type = "jsonb" if connection.vendor == "postgresql" else "text"
        values = ", ".join(["(%s, %s, %s, %s)"] * len(calls))
        sql = (  # identifiers from the model, every value a parameter
            f"UPDATE {table} SET {quote(step.column)} = CAST(v.column2 AS integer), "  # noqa: S608
            f"{quote(approval.column)} = CAST(v.column3 AS bigint), "
            f"{quote(result.column)} = CAST(v.column4 AS {json_type}), "
            f"{quote(state_.column)} = %s, {quote(finished_.column)} = %s, "
            f"{quote(recorded_.column)} = %s "
            f"FROM (VALUES {values}) AS v WHERE {table}.id = CAST(v.column1 AS bigint)"
        )
        finished = finished_.get_db_prep_save(finished_at, connection)
        params = [state, finished, recorded]
        for call in calls:
            params += [
                call.pk,
                call.step,
                call.approval_id,
                result.get_db_prep_save(call.result, connection),
            ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount


class McpCall(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(McpSession, on_delete=models.CASCADE, related_name="calls")
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="calls")
    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="+")
    tool = models.CharField(max_length=255)
    canonical = models.CharField(max_length=64)  # sha256 of the canonical arguments
    arguments = models.JSONField(null=True, blank=True)
    step = models.PositiveIntegerField()
    tool_call_id = models.CharField(max_length=64)
    approval = models.OneToOneField(
        Approval, null=True, blank=True, on_delete=models.SET_NULL, related_name="mcp_call"
    )
    state = models.CharField(max_length=12, choices=CallState.choices, default=CallState.HELD)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    forwarded_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The client's JSON-RPC id of the `tools/call` (its `notifications/cancelled` names it).
    request_id = models.CharField(max_length=100, blank=True)
    # A call that passed without a human before its record was written (gateway/flow.py's
    # fast path): "read_only", or the approving rule's public id; "" for every other call.
    passed_by = models.CharField(max_length=40, blank=True)
    # False while a passed call's step, approval and audit are still to be written (the
    # write-behind; the sweep records what a stopped process left: gateway/records.py).
    recorded = models.BooleanField(default=True)
    # A task-augmented call (MCP Tasks, protocol 2025-11-25: gateway/tasks.py): its task id is
    # its `tool_call_id`, readable by the same principal on the same server; `task_ttl` the
    # retention the client asked for, in milliseconds (None: as long as the call is kept).
    task = models.BooleanField(default=False)
    task_ttl = models.PositiveBigIntegerField(null=True, blank=True)

    objects = McpCallQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(
                fields=["server", "principal", "tool", "canonical", "state"],
                name="mcp_call_attach",
            ),
            models.Index(
                fields=["created_at"],
                condition=models.Q(recorded=False),
                name="mcp_call_unrecorded",
            ),
            models.Index(fields=["session", "request_id"], name="mcp_call_request"),
            models.Index(
                fields=["server", "principal", "tool_call_id"],
                condition=models.Q(task=True),
                name="mcp_call_task",
            ),
        ]
