"""A run and everything that happened in it, as the runtime reported it."""

from django.db import models
from django.utils import timezone

from console.core.kept import Kept
from console.models import Principal, Tenant


class RunStatus(models.TextChoices):
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    DONE = "done"
    ABORTED = "aborted"
    FAILED = "failed"


FINISHED_STATUSES = (RunStatus.DONE, RunStatus.ABORTED, RunStatus.FAILED)

# Severity order for widen-only verdicts.
VERDICT_SEVERITY = {"allowed": 0, "flagged": 1, "blocked": 2}


class Agent(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    external_id = models.CharField(max_length=255)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "external_id"], name="agent_unique_id")
        ]

    def __str__(self):
        return self.external_id


class AgentVersion(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    first_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "version"], name="agentversion_unique")
        ]


class Conversation(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="conversations")
    external_id = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "external_id"], name="conversation_unique_id")
        ]

    def __str__(self):
        return self.external_id


class Run(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="runs")
    external_id = models.CharField(max_length=128)  # the wire's run id, unique per tenant
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    agent_version = models.PositiveIntegerField(default=0)
    current_agent_id = models.CharField(max_length=255)
    # Null: a run for no principal (a snapshot without userId). Shown as such, never invented.
    principal = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    role_ids = models.JSONField(default=list)  # the principal's roles at admission
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    # The parent's wire id; the parent need not be known (yet). Children are found by this id.
    parent_run_id = models.CharField(max_length=128, null=True, blank=True)
    status = models.CharField(max_length=32, choices=RunStatus.choices, default=RunStatus.RUNNING)
    input = models.JSONField(null=True, blank=True)
    limits = models.JSONField(default=dict)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_minor_units = models.BigIntegerField(default=0)
    usage_by_model = models.JSONField(default=dict)
    steps = models.PositiveIntegerField(default=0)
    last_seq = models.PositiveBigIntegerField(default=0)
    todos = models.JSONField(default=list)
    taint_summary = models.JSONField(null=True, blank=True)
    promoted_tools = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    ended_by_tool = models.CharField(max_length=255, null=True, blank=True)
    finish_reason = models.CharField(max_length=64, null=True, blank=True)
    usage_denied = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    # The admission body as received (normalized), to tell an idempotent replay from a conflict.
    admission = models.JSONField(null=True, blank=True)
    # The latest RunState snapshot (wire form) and its digest, for GET/PUT .../state.
    snapshot = models.JSONField(null=True, blank=True)
    snapshot_digest = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "external_id"], name="run_unique_id")
        ]
        indexes = [
            models.Index(fields=["tenant", "-started_at", "-id"], name="run_tenant_newest"),
            models.Index(
                fields=["tenant", "principal", "-started_at", "-id"], name="run_principal_newest"
            ),
            models.Index(
                fields=["tenant", "conversation", "-started_at", "-id"],
                name="run_conversation_newest",
            ),
            models.Index(
                fields=["tenant", "status", "-started_at", "-id"], name="run_status_newest"
            ),
            models.Index(fields=["tenant", "agent", "-started_at", "-id"], name="run_agent_newest"),
            models.Index(fields=["tenant", "parent_run_id"], name="run_parent"),
        ]

    def __str__(self):
        return self.external_id

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def usage(self) -> dict:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_minor_units": self.cost_minor_units,
        }


class Step(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_rows")
    number = models.PositiveIntegerField()  # 1-based
    agent_id = models.CharField(max_length=255)
    model = models.CharField(max_length=255, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_minor_units = models.BigIntegerField(default=0)
    finish_reason = models.CharField(max_length=64, null=True, blank=True)
    trace_id = models.CharField(max_length=255, null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="step_unique")]
        ordering = ["number"]


class Message(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveIntegerField()  # 0-based order within the run
    step = models.PositiveIntegerField(null=True, blank=True)
    role = models.CharField(max_length=16)  # system|user|assistant|tool
    content = models.JSONField()  # a string, or a list of parts with $bytes/$url envelopes
    tool_calls = models.JSONField(null=True, blank=True)  # [{id, name, arguments}]
    tool_call_id = models.CharField(max_length=255, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="message_unique")]
        ordering = ["position"]


class ToolResult(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_results")
    step = models.PositiveIntegerField(null=True, blank=True)
    tool_call_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    result = models.JSONField(null=True, blank=True)
    is_error = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["run", "tool_call_id"], name="toolresult_call")]


class Handoff(models.Model):
    class Kind(models.TextChoices):
        HANDOFF = "handoff"
        RETURNED = "returned"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="handoffs")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.HANDOFF)
    step = models.PositiveIntegerField(null=True, blank=True)
    from_agent_id = models.CharField(max_length=255, blank=True)
    to_agent_id = models.CharField(max_length=255)
    child_run_id = models.CharField(max_length=128, null=True, blank=True)
    position = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["position", "id"]


class Verdict(models.Model):
    """Every verdict ever recorded (widen-only: rows are only added)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="verdict_rows")
    turn = models.CharField(max_length=32)  # "<step>:<offset>"
    verdict = models.CharField(max_length=16)  # allowed|flagged|blocked
    guard = models.CharField(max_length=255, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["run", "turn"], name="verdict_turn")]


class TurnVerdict(models.Model):
    """The verdict a turn of a run holds: the widest recorded (on equal severity the earlier
    stands). The run's `verdicts` (`run_verdicts`). One row per turn, widened in place by one
    upsert per unit of work (`runs.services.writes.turn_verdicts_widen`), so a long run's
    batches cost the same: nothing per run is rewritten."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="turn_verdicts")
    turn = models.CharField(max_length=32)
    severity = models.PositiveSmallIntegerField()  # VERDICT_SEVERITY of `verdict`
    verdict = models.CharField(max_length=16)
    guard = models.CharField(max_length=255, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "turn"], name="turnverdict_unique")]


class RunTrace(models.Model):
    """A trace id a run reported (a step's, an outcome's), once each, in the order first seen
    (by id): the run's trace ids (`run_trace_ids`). Added by `INSERT ... ON CONFLICT DO
    NOTHING` (`runs.services.writes.run_traces_add`)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="traces")
    trace_id = models.CharField(max_length=255)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "trace_id"], name="runtrace_unique")]


def run_verdicts(run: Run) -> dict:
    """turn -> {verdict, guard, reason}: the verdict each turn holds, turns in the order first
    recorded (one query, compiled once: console/core/kept.py)."""
    return {turn: _verdict(*rest) for turn, *rest in _RUN_VERDICTS(run.pk)}


_VERDICT_COLUMNS = ("turn", "verdict", "guard", "reason")
_RUN_VERDICTS = Kept(
    lambda run_pk: (
        TurnVerdict.objects.filter(run_id=run_pk).order_by("id").values_list(*_VERDICT_COLUMNS)
    )
)


def _verdict(verdict, guard, reason) -> dict:
    return {"verdict": verdict, "guard": guard, "reason": reason}


def runs_verdicts(run_pks) -> dict[int, dict]:
    """`run_verdicts` of many runs in one query: run pk -> turn -> verdict (runs without any
    are left out)."""
    found: dict[int, dict] = {}
    rows = TurnVerdict.objects.filter(run_id__in=list(run_pks)).order_by("run_id", "id")
    for run_id, turn, *rest in rows.values_list("run_id", *_VERDICT_COLUMNS):
        found.setdefault(run_id, {})[turn] = _verdict(*rest)
    return found


def run_trace_ids(run: Run) -> list[str]:
    """The run's trace ids in the order first reported (one query)."""
    rows = RunTrace.objects.filter(run=run).order_by("id")
    return list(rows.values_list("trace_id", flat=True))


class RunEvent(models.Model):
    """The raw, seq-numbered event log of a run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=64)
    data = models.JSONField()  # the event as received (normalized), for replay comparison
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="runevent_unique_seq")]
        ordering = ["seq"]


class UsageAdjustment(models.Model):
    """Usage not tied to one step: the growth of a snapshot's or an outcome's usage over what
    the console held (it may be negative: a snapshot may correct a run down). With the Step
    rows it is every figure the rollups hold, so the rollups can be rebuilt from the two
    (`runs.services.usage.usage_rollups_rebuild`, e.g. after a tenant changes time zone)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="usage_adjustments")
    at = models.DateTimeField(default=timezone.now)  # when it arrived: the rollup day's moment
    model = models.CharField(max_length=255, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_minor_units = models.BigIntegerField(default=0)
    steps = models.IntegerField(default=0)


class UsageDaily(models.Model):
    """Usage rollup per tenant, tenant-local day, principal, agent and model (team through
    the principal): a step's usage counts on the day, in the tenant's time zone, it finished;
    the agent is the run's (`agentId`), as budgets scope agents.

    Keys are the wire ids ('' for none) so that the unique constraint holds on every database.
    Written only by additive upserts (`runs.services.common._usage_daily_add`), and rebuilt
    from Step + UsageAdjustment rows by `runs.services.usage.usage_rollups_rebuild`.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage_daily")
    day = models.DateField()
    principal_id = models.CharField(max_length=255, blank=True)
    agent_id = models.CharField(max_length=255, blank=True)
    model = models.CharField(max_length=255, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_minor_units = models.BigIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "day", "principal_id", "agent_id", "model"],
                name="usagedaily_unique",
            )
        ]
        indexes = [models.Index(fields=["tenant", "day"], name="usagedaily_tenant_day")]


class UsageDailyBy(models.Model):
    """The usage rollup summed over every key but one: per tenant, tenant-local day and one
    dimension's key (a principal's id, an agent's id or a model; '' for none, as in
    `UsageDaily`). What a report by one dimension (or none) and the budgets' spend read: at
    most principals + agents + models rows a day, whatever the volume, where `UsageDaily`
    holds a row per (principal, agent, model) combination used that day (25,000 a day for a
    tenant of 2,000 principals, 12 agents and 3 models at 11,000 runs a day).

    Written with `UsageDaily` by the same additive upserts
    (`runs.services.writes._usage_daily_add`) and rebuilt from it
    (`runs.services.usage.usage_by_rebuild`): for every day and dimension its rows sum to the
    day's `UsageDaily` rows."""

    class Dimension(models.TextChoices):
        PRINCIPAL = "principal"
        AGENT = "agent"
        MODEL = "model"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage_daily_by")
    dimension = models.CharField(max_length=16, choices=Dimension.choices)
    day = models.DateField()
    key = models.CharField(max_length=255, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_minor_units = models.BigIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "dimension", "day", "key"], name="usagedailyby_unique"
            )
        ]


# The `UsageDaily` column each dimension of `UsageDailyBy` sums by.
USAGE_BY_COLUMNS = {"principal": "principal_id", "agent": "agent_id", "model": "model"}


# --- what `Run.snapshot` holds (written by runs/services/snapshots.py) ---


def snapshot_envelope(run: Run) -> dict:
    """What `run.snapshot` holds: the latest state, the lastSeq it was stored at, and the
    digests of the outcomes applied (runs/services/snapshots.py writes it)."""
    held = run.snapshot if isinstance(run.snapshot, dict) else {}
    return {
        "state": held.get("state"),
        "lastSeq": held.get("lastSeq", 0),
        "outcomes": list(held.get("outcomes", [])),
    }


def snapshot_current_state(run: Run) -> dict | None:
    envelope = snapshot_envelope(run)
    if envelope["state"] is not None and envelope["lastSeq"] == run.last_seq:
        return envelope["state"]
    return None
