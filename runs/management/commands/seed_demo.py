"""`manage.py seed_demo --runs N [--tenant SLUG]`: realistic demo data, fast.

Rows are written with bulk inserts in chunks (one transaction each), bypassing the ingest
services on purpose: this is test data at volume (100,000 runs and 1,000,000 events in a few
minutes on PostgreSQL), not a runtime's report, so nothing is published or audited. Every run
gets a consistent story: its events (10 per run on average) match its steps, messages, tool
results, handoffs, verdicts, todos and held calls.
"""

from __future__ import annotations

import random
import secrets
import time
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from console.core.rows import bulk_insert
from console.directory.services import tenant_create
from console.models import Principal
from runs.models import (
    VERDICT_SEVERITY,
    Agent,
    AgentVersion,
    Conversation,
    Handoff,
    Message,
    Run,
    RunEvent,
    RunStatus,
    RunTrace,
    Step,
    ToolResult,
    TurnVerdict,
    UsageDaily,
    UsageDailyBy,
    Verdict,
)
from runs.services.usage import usage_rollups_rebuild

CHUNK = 2000
AGENTS = ("support-bot", "billing-bot", "research-agent", "triage", "sql-analyst", "scheduler")
MODELS = ("model-small", "model-large", "model-fallback")
TOOLS = ("send_email", "refund_payment", "lookup_invoice", "run_sql", "create_ticket", "web_fetch")
HELD_TOOLS = ("send_email", "refund_payment", "run_sql")
STATUSES = (
    (RunStatus.DONE, 70),
    (RunStatus.RUNNING, 10),
    (RunStatus.AWAITING_APPROVAL, 8),
    (RunStatus.FAILED, 7),
    (RunStatus.ABORTED, 5),
)
ASKS = (
    "Where is my invoice for March?",
    "Please refund order 4411, it arrived broken.",
    "Summarise last week's tickets about login problems.",
    "How many signups did we get yesterday by country?",
    "Book a call with the onboarding team next Tuesday.",
)


class Command(BaseCommand):
    help = "Seed a tenant with realistic runs, events and held calls using bulk inserts."

    def add_arguments(self, parser):
        parser.add_argument("--runs", type=int, required=True, help="how many runs to make")
        parser.add_argument("--tenant", default="demo", help="tenant slug (made if missing)")
        parser.add_argument("--principals", type=int, default=200)
        parser.add_argument("--conversations", type=int, default=None)
        parser.add_argument("--days", type=int, default=30, help="spread runs over this many days")
        parser.add_argument("--seed", type=int, default=None, help="random seed (repeatable)")

    def handle(self, *args, **opts):
        if opts["runs"] < 1:
            raise CommandError("--runs must be at least 1")
        if opts["principals"] < 1 or opts["days"] < 1:
            raise CommandError("--principals and --days must be at least 1")
        tenant, _ = tenant_create(slug=opts["tenant"])
        seeder = Seeder(tenant=tenant, rng=random.Random(opts["seed"]), days=opts["days"])
        conversations = opts["conversations"] or max(1, opts["runs"] // 20)
        seeder.directory(principals=opts["principals"], conversations=conversations)
        started = time.monotonic()
        made = {"runs": 0, "events": 0}
        for offset in range(0, opts["runs"], CHUNK):
            counts = seeder.chunk(min(CHUNK, opts["runs"] - offset))
            made = {k: made[k] + counts[k] for k in made}
            self.stdout.write(f"  {made['runs']} runs, {made['events']} events", ending="\r")
        usage_rollups_rebuild(tenant=tenant)  # the steps' usage, as ingest would have added it
        if connection.vendor == "postgresql":  # fresh statistics, or the planner guesses
            with connection.cursor() as cursor:
                models = (Run, RunEvent, Message, Step, Approval, UsageDaily, UsageDailyBy)
                tables = [m._meta.db_table for m in models]
                cursor.execute(f"ANALYZE {', '.join(tables)}")
        seconds = time.monotonic() - started
        self.stdout.write(
            f"seeded tenant '{tenant.slug}': {made['runs']} runs, {made['events']} events "
            f"in {seconds:.1f}s"
        )


def insert(model, objs: list) -> None:
    """Runs by bulk_create (their ids come back, children need them); every other row through
    the ingest path's own fast insert (COPY on PostgreSQL), once its run id is filled in."""
    if model is Run:
        Run.objects.bulk_create(objs, batch_size=1000)
        return
    for obj in objs:
        obj._prepare_related_fields_for_save(operation_name="bulk_create")
    bulk_insert(objs)


class Seeder:
    def __init__(self, *, tenant, rng: random.Random, days: int):
        self.tenant, self.rng, self.days = tenant, rng, days
        self.now = timezone.now()
        self.token = secrets.token_hex(3)  # run ids unique across invocations
        self.serial = 0

    def directory(self, *, principals: int, conversations: int) -> None:
        t = self.tenant
        Principal.objects.bulk_create(
            [
                Principal(tenant=t, external_id=f"user{i:04d}@example.com", name=f"User {i:04d}")
                for i in range(principals)
            ],
            ignore_conflicts=True,
        )
        Agent.objects.bulk_create(
            [Agent(tenant=t, external_id=a) for a in AGENTS], ignore_conflicts=True
        )
        Conversation.objects.bulk_create(
            [Conversation(tenant=t, external_id=f"conv_{i:06d}") for i in range(conversations)],
            ignore_conflicts=True,
        )
        self.principals = list(Principal.objects.filter(tenant=t).values_list("pk", flat=True))
        self.agents = dict(Agent.objects.filter(tenant=t).values_list("external_id", "pk"))
        self.conversations = list(
            Conversation.objects.filter(tenant=t).values_list("pk", flat=True)
        )
        AgentVersion.objects.bulk_create(
            [
                AgentVersion(agent_id=pk, version=v)
                for pk in self.agents.values()
                for v in (1, 2, 3)
            ],
            ignore_conflicts=True,
        )

    @transaction.atomic
    def chunk(self, n: int) -> dict:
        # Stories first (they fill in the runs' totals), then the runs, then their rows:
        # bulk_create takes each child's run id from its (by then saved) run.
        runs = [self._run() for _ in range(n)]
        rows = {
            model: []
            for model in (
                Step,
                Message,
                ToolResult,
                Handoff,
                Verdict,
                TurnVerdict,
                RunTrace,
                Approval,
            )
        }
        events = []
        for run in runs:
            events += Story(self, run, rows).tell()
        insert(Run, runs)
        for model, objs in rows.items():
            insert(model, objs)
        insert(RunEvent, events)
        return {"runs": len(runs), "events": len(events)}

    def _run(self) -> Run:
        rng = self.rng
        self.serial += 1
        agent = rng.choice(AGENTS)
        status = rng.choices([s for s, _ in STATUSES], weights=[w for _, w in STATUSES])[0]
        started = self.now - timedelta(seconds=rng.randint(0, self.days * 86400))
        return Run(
            tenant=self.tenant,
            external_id=f"run_{self.token}_{self.serial:07d}",
            agent_id=self.agents[agent],
            agent_version=rng.choice((1, 2, 3)),
            current_agent_id=agent,
            principal_id=None if rng.random() < 0.05 else rng.choice(self.principals),
            role_ids=rng.choice((["viewer"], ["editor"], ["editor", "billing"], [])),
            conversation_id=None if rng.random() < 0.3 else rng.choice(self.conversations),
            status=status,
            input={"ask": rng.choice(ASKS)},
            limits=rng.choice(
                (
                    {"costCeilingMinorUnits": 500, "maxSteps": 20, "wallClockTimeoutMs": 600000},
                    {"costCeilingMinorUnits": 100, "maxSteps": 8},
                    {},
                )
            ),
            started_at=started,
            updated_at=started,
        )


class Story:
    """One run's events and the rows they would have produced."""

    def __init__(self, seeder: Seeder, run: Run, rows: dict):
        self.s, self.run, self.rows, self.rng = seeder, run, rows, seeder.rng
        self.events: list[RunEvent] = []
        self.at = run.started_at
        self.position = 0

    def event(self, type_: str, **data) -> None:
        self.at += timedelta(milliseconds=self.rng.randint(200, 4000))
        seq = len(self.events) + 1
        wire = {"seq": seq, "type": type_, "at": self.at.isoformat(), **data}
        self.events.append(RunEvent(run=self.run, seq=seq, type=type_, data=wire, at=self.at))

    def message(self, step: int, role: str, content, tool_calls=None, tool_call_id=None):
        self.rows[Message].append(
            Message(
                run=self.run,
                position=self.position,
                step=step,
                role=role,
                content=content,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                created_at=self.at,
            )
        )
        self.position += 1
        wire = {"role": role, "content": content}
        if tool_calls:
            wire["toolCalls"] = tool_calls
        if tool_call_id:
            wire["toolCallId"] = tool_call_id
        self.event("message", step=step, message=wire)

    def tell(self) -> list[RunEvent]:
        run, rng = self.run, self.rng
        steps = rng.randint(1, 3)
        for number in range(1, steps + 1):
            self.step(number, last=number == steps)
        if rng.random() < 0.4:
            todos = [
                {"id": "t1", "content": "understand the request", "status": "done"},
                {"id": "t2", "content": "call the tool", "status": rng.choice(("done", "pending"))},
            ]
            run.todos = todos
            self.event("todos.updated", todos=todos)
        if rng.random() < 0.1:
            self.verdict(steps)
        self.finish(steps)
        run.last_seq = len(self.events)
        run.updated_at = self.at
        return self.events

    def step(self, number: int, *, last: bool) -> None:
        run, rng = self.run, self.rng
        model = rng.choice(MODELS)
        agent = run.current_agent_id
        self.event("step.started", step=number, agentId=agent, model=model)
        step = Step(run=run, number=number, agent_id=agent, model=model, started_at=self.at)
        if number == 1:
            self.message(1, "user", run.input["ask"])
        tool = rng.choice(TOOLS)
        call_id = f"call_{run.external_id[-7:]}_{number}"
        arguments = {"query": run.input["ask"][:40], "limit": rng.randint(1, 50)}
        calls = [{"id": call_id, "name": tool, "arguments": arguments}]
        self.message(number, "assistant", "Let me check that.", tool_calls=calls)
        if last and run.status == RunStatus.AWAITING_APPROVAL:
            self.held(number, call_id, rng.choice(HELD_TOOLS), arguments)
        else:
            self.tool_result(number, call_id, tool)
        if rng.random() < 0.05 and not last:
            self.handoff(number)
        usage = {
            "inputTokens": rng.randint(200, 4000),
            "outputTokens": rng.randint(20, 800),
            "costMinorUnits": rng.randint(1, 60),
        }
        trace = f"trace-{secrets.token_hex(6)}"
        self.event(
            "step.finished",
            step=number,
            usage=usage,
            model=model,
            finishReason="tool_calls",
            traceId=trace,
        )
        step.input_tokens, step.output_tokens = usage["inputTokens"], usage["outputTokens"]
        step.cost_minor_units, step.finished_at = usage["costMinorUnits"], self.at
        step.finish_reason, step.trace_id = "tool_calls", trace
        self.rows[Step].append(step)
        self.add_usage(model, usage, trace, number)

    def add_usage(self, model, usage, trace, number) -> None:
        run = self.run
        run.input_tokens += usage["inputTokens"]
        run.output_tokens += usage["outputTokens"]
        run.cost_minor_units += usage["costMinorUnits"]
        held = run.usage_by_model.setdefault(
            model, {"input_tokens": 0, "output_tokens": 0, "cost_minor_units": 0}
        )
        held["input_tokens"] += usage["inputTokens"]
        held["output_tokens"] += usage["outputTokens"]
        held["cost_minor_units"] += usage["costMinorUnits"]
        self.rows[RunTrace].append(RunTrace(run=run, trace_id=trace))
        run.steps = number

    def tool_result(self, step: int, call_id: str, tool: str) -> None:
        is_error = self.rng.random() < 0.08
        result = {"error": "upstream timed out"} if is_error else {"ok": True, "rows": 3}
        self.event(
            "tool.result",
            step=step,
            toolCallId=call_id,
            toolName=tool,
            result=result,
            isError=is_error,
        )
        self.rows[ToolResult].append(
            ToolResult(
                run=self.run,
                step=step,
                tool_call_id=call_id,
                tool_name=tool,
                result=result,
                is_error=is_error,
                created_at=self.at,
            )
        )

    def held(self, step: int, call_id: str, tool: str, arguments: dict) -> None:
        call = {
            "toolCallId": call_id,
            "toolName": tool,
            "arguments": arguments,
            "reason": f"{tool} needs a human",
            "rejectionMessage": "A reviewer declined this call.",
        }
        self.event("approval.requested", step=step, calls=[call])
        self.rows[Approval].append(
            Approval(
                tenant_id=self.run.tenant_id,
                run=self.run,
                step=step,
                tool_call_id=call_id,
                tool_name=tool,
                arguments=arguments,
                reason=call["reason"],
                rejection_message=call["rejectionMessage"],
                status=ApprovalStatus.PENDING,
                requested_at=self.at,
                expires_at=self.s.now + timedelta(days=1),
            )
        )

    def handoff(self, step: int) -> None:
        target = self.rng.choice([a for a in AGENTS if a != self.run.current_agent_id])
        self.event("handoff", step=step, fromAgentId=self.run.current_agent_id, toAgentId=target)
        self.rows[Handoff].append(
            Handoff(
                run=self.run,
                step=step,
                from_agent_id=self.run.current_agent_id,
                to_agent_id=target,
                created_at=self.at,
            )
        )
        self.run.current_agent_id = target

    def verdict(self, step: int) -> None:
        verdict = self.rng.choice(("flagged", "blocked"))
        turn, guard, reason = f"{step}:0", "pii-guard", "the answer quotes an email address"
        self.event("verdict", turn=turn, verdict=verdict, guard=guard, reason=reason)
        self.rows[Verdict].append(
            Verdict(run=self.run, turn=turn, verdict=verdict, guard=guard, reason=reason)
        )
        self.rows[TurnVerdict].append(  # one verdict per turn: the one it holds
            TurnVerdict(
                run=self.run,
                turn=turn,
                severity=VERDICT_SEVERITY[verdict],
                verdict=verdict,
                guard=guard,
                reason=reason,
            )
        )

    def finish(self, steps: int) -> None:
        run = self.run
        if run.status in (RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL):
            return
        error = None
        if run.status == RunStatus.FAILED:
            error = {"code": "tool_failed", "message": "the tool kept failing"}
        else:
            self.message(steps, "assistant", "Done: here is what I found.")
        reason = "stop" if run.status == RunStatus.DONE else "aborted"
        data = {"status": str(run.status), "finishReason": reason}
        if error:
            data["error"] = error
        self.event("run.finished", **data)
        run.finished_at, run.finish_reason, run.error = self.at, reason, error
