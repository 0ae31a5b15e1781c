"""`manage.py demo_agent [--runs N] [--url URL] [--key KEY]`: a simulated agent runtime.

Built only on the SDK (it talks to the console over HTTP like any runtime): runs for a few
demo principals, in conversations or in none, with steps and realistic usage, todos, a
handoff, occasional security verdicts, and tool calls held for approval, after which it acts
on the decision (runs an approved call with the reviewer's arguments; tells the model a
denial's message). Before each step it checks the run's budgets for the step's most
expensive outcome: over an `ask` budget it waits for the lead's override, refused it stops the
run with `usageDenied`. `--runs 0` runs forever. The key defaults to var/demo-agent.key, which
`demo_setup` writes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import secrets
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from gavel_sdk import BudgetExceeded, GavelClient, GavelError, RetryPolicy, Usage
from gavel_sdk.session import HeldCall, RunSession

PRINCIPALS = ("alice@demo.example", "bob@demo.example", "carol@demo.example")
CONVERSATIONS = {
    "alice@demo.example": ("conv-alice-billing", "conv-alice-travel"),
    "bob@demo.example": ("conv-bob-onboarding",),
    "carol@demo.example": ("conv-carol-data",),
}
# model: (input, output) price in minor units per million tokens
MODELS = {"model-small": (30, 120), "model-large": (300, 1500)}
SCENARIOS = (
    {
        "agent": "support-bot",
        "ask": "Please refund order 4411, it arrived broken.",
        "lookup": ("lookup_order", {"orderId": "4411"}, {"status": "delivered", "total": 4999}),
        "held": ("refund_payment", {"orderId": "4411", "amountMinorUnits": 4999}),
        "handoff": "billing-bot",
    },
    {
        "agent": "support-bot",
        "ask": "Send Dana the summary of yesterday's outage.",
        "lookup": ("search_tickets", {"query": "outage"}, {"count": 3}),
        "held": ("send_email", {"to": "dana@example.com", "subject": "Outage summary"}),
        "handoff": None,
    },
    {
        "agent": "sql-analyst",
        "ask": "How many signups did we get yesterday by country?",
        "lookup": ("describe_table", {"table": "signups"}, {"columns": ["country", "at"]}),
        "held": ("run_sql", {"query": "SELECT country, count(*) FROM signups GROUP BY 1"}),
        "handoff": None,
    },
    {
        "agent": "research-agent",
        "ask": "Summarise last week's tickets about login problems.",
        "lookup": ("search_tickets", {"query": "login", "days": 7}, {"count": 12}),
        "held": None,
        "handoff": None,
    },
)


# Short, many retries: started beside the server, the agent waits for it to answer, and
# rides out a restart of the console without losing an event.
START_RETRY = RetryPolicy(attempts=120, base=0.1, cap=0.5)


def default_key() -> str | None:
    path = Path(settings.VAR_DIR) / "demo-agent.key"
    return path.read_text().strip() if path.exists() else None


class DemoRun:
    """One simulated run, step by step, paced like a model that thinks."""

    def __init__(
        self,
        client: GavelClient,
        rng: random.Random,
        *,
        pace: float,
        timeout: float,
        active: threading.Semaphore,
        first: bool = False,
    ):
        self.rng, self.pace, self.active, self.first = rng, pace, active, first
        # The first run holds a call at once, so a newcomer's inbox fills in seconds.
        self.scenario = SCENARIOS[1] if first else rng.choice(SCENARIOS)
        principal = rng.choice(PRINCIPALS)
        conversation = rng.choice((*CONVERSATIONS[principal], None))  # some runs have none
        self.model = rng.choice(tuple(MODELS))
        self.session = RunSession(
            client,
            f"demo_{time.strftime('%H%M%S')}_{secrets.token_hex(3)}",
            agent_id=self.scenario["agent"],
            agent_version=rng.randint(1, 4),
            principal_id=principal,
            conversation_id=conversation,
            input={"ask": self.scenario["ask"]},
            limits={"costCeilingMinorUnits": 500, "maxSteps": 12},
            model=self.model,
            decision_timeout=timeout,
            budget_estimate=self.estimate,
        )
        self.events = self.session.events

    def pause(self, low=0.3, high=1.2) -> None:
        time.sleep(self.rng.uniform(low, high) * self.pace)

    def estimate(self) -> int:
        """The most a step of this model costs (what the budget check is asked for)."""
        p_in, p_out = MODELS[self.model]
        return math.ceil((4000 * p_in + 600 * p_out) / 1_000_000)

    @contextlib.contextmanager
    def waiting(self):
        """A run waiting for a human leaves its working slot to another run."""
        self.active.release()
        try:
            yield
        finally:
            self.active.acquire()

    def step(self, **kwargs) -> None:
        """A new step, once the run's budgets allow it (BudgetExceeded: the run is over)."""
        self.session.before_step(waiting=self.waiting)
        self.events.step_started(**kwargs)

    def usage(self) -> Usage:
        n_in, n_out = self.rng.randint(600, 4000), self.rng.randint(40, 600)
        p_in, p_out = MODELS[self.model]
        return Usage(n_in, n_out, math.ceil((n_in * p_in + n_out * p_out) / 1_000_000))

    def todos(self, done: int) -> None:
        items = ["Understand the request", "Gather the facts", "Act and report back"]
        self.events.todos(
            [
                {"id": f"t{i}", "content": text, "status": _todo_status(i, done)}
                for i, text in enumerate(items)
            ]
        )

    def run(self) -> str:
        try:
            return self._run()
        except BudgetExceeded as exc:  # finished already, with usageDenied
            return f"stopped: {exc}"

    def _run(self) -> str:
        s, ev = self.scenario, self.events
        self.session.start()
        self.todos(0)
        self.step()
        ev.message("user", s["ask"])
        name, args, result = s["lookup"]
        call_id = f"call_{secrets.token_hex(4)}"
        ev.message("assistant", "Let me look that up.", tool_calls=[_call(call_id, name, args)])
        self._verdicts()
        ev.tool_result(call_id, name, result)
        ev.message("tool", json.dumps(result), tool_call_id=call_id)  # as runtimes send it
        ev.step_finished(self.usage(), finish_reason="tool_calls")
        self.todos(1)
        self.session.flush()
        if not self.first:  # the first run goes straight to its held call
            self.pause()
        if s["handoff"]:
            self._handoff(s["handoff"])
        if not self.first and self.rng.random() < 0.06:
            self.session.finish("failed", error={"code": "model_error", "message": "upstream 529"})
            return "failed"
        if s["held"]:
            self._held(*s["held"])
        self.step()
        ev.message("assistant", "Done: here is what I did and why.")
        ev.step_finished(self.usage(), finish_reason="stop")
        self.todos(3)
        self.session.finish("done", result={"text": "Done."}, finish_reason="stop")
        return "done"

    def _verdicts(self) -> None:
        roll = self.rng.random()
        if roll < 0.25:
            verdict = "blocked" if roll < 0.05 else "flagged"
            self.events.verdict(
                f"{self.events.step}:0",
                verdict,
                guard="prompt-injection",
                reason="the tool result contains instructions addressed to the assistant",
            )

    def _handoff(self, to_agent: str) -> None:
        ev, from_agent = self.events, self.scenario["agent"]
        ev.handoff(from_agent, to_agent)
        self.step(agent_id=to_agent)
        ev.message("assistant", "Billing here: the order qualifies for a full refund.")
        ev.step_finished(self.usage(), finish_reason="stop")
        ev.handoff_returned(from_agent)
        self.session.flush()
        self.pause()

    def _held(self, name: str, args: dict) -> None:
        ev, call_id = self.events, f"call_{secrets.token_hex(4)}"
        self.step()
        ev.message("assistant", f"I need to call {name}.", tool_calls=[_call(call_id, name, args)])
        ev.step_finished(self.usage(), finish_reason="tool_calls")
        held = HeldCall(
            call_id,
            name,
            args,
            reason=f"{name} changes something outside the agent",
            rejection_message=f"The reviewer did not allow {name}. Tell the user what you would "
            "have done instead.",
        )
        with self.waiting():
            decision = self.session.hold([held])[call_id]
        self.todos(2)
        if decision.approved:
            ev.tool_result(call_id, name, {"ok": True, "ran_with": decision.arguments})
            ev.message("tool", f"{name} ran", tool_call_id=call_id)
        else:
            ev.tool_result(call_id, name, decision.message, is_error=True)
            ev.message("tool", decision.message or "denied", tool_call_id=call_id)
        self.session.flush()
        self.pause()


def _call(call_id: str, name: str, args: dict) -> dict:
    return {"id": call_id, "name": name, "arguments": args}


def _todo_status(index: int, done: int) -> str:
    return "done" if index < done else "in_progress" if index == done else "pending"


class Command(BaseCommand):
    help = "Run a simulated agent runtime against a console (through the SDK)."
    requires_system_checks = []  # a process beside the server: its checks are not ours

    def add_arguments(self, parser):
        host, port = os.environ.get("HOST", "127.0.0.1"), os.environ.get("PORT", "8000")
        parser.add_argument("--runs", type=int, default=6, help="how many runs; 0: forever")
        parser.add_argument("--url", default=os.environ.get("GAVEL_URL", f"http://{host}:{port}"))
        parser.add_argument("--key", default=None, help="ingest key (default: var/demo-agent.key)")
        parser.add_argument("--concurrency", type=int, default=3, help="runs working at once")
        parser.add_argument(
            "--max-waiting", type=int, default=12, help="runs waiting for a decision at once"
        )
        parser.add_argument("--pace", type=float, default=1.0, help="think-time multiplier")
        parser.add_argument("--decision-timeout", type=float, default=900.0)
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args, runs, url, key, concurrency, pace, decision_timeout, seed, **opts):
        max_waiting = opts["max_waiting"]
        key = key or default_key()
        if not key:
            raise CommandError("no key: pass --key or run `manage.py demo_setup` first")
        if runs < 0 or concurrency < 1 or pace < 0 or max_waiting < 0:
            raise CommandError(
                "--runs, --max-waiting and --pace must be >= 0 and --concurrency >= 1"
            )
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
        rng, lock = random.Random(seed), threading.Lock()
        active = threading.Semaphore(concurrency)
        serial = iter(range(1 << 62))

        def one() -> str:
            with lock:
                run_rng, first = random.Random(rng.random()), next(serial) == 0
            with GavelClient(url, key, retry=START_RETRY) as client, active:
                demo = DemoRun(
                    client, run_rng, pace=pace, timeout=decision_timeout, active=active, first=first
                )
                try:
                    outcome = demo.run()
                except GavelError as exc:
                    outcome = f"error {exc.code}: {exc.message}"
                    with contextlib.suppress(GavelError):  # the console may be down
                        demo.session.finish(
                            "aborted", error={"code": exc.code, "message": exc.message}
                        )
                return f"{demo.session.run_id} ({demo.scenario['agent']}): {outcome}"

        self.stdout.write(f"demo agent → {url} ({'forever' if runs == 0 else f'{runs} runs'})")
        gap = (lambda: rng.uniform(0.5, 2.0) * pace) if runs == 0 else (lambda: 0.0)
        self._pool(one, runs=runs, workers=concurrency + max_waiting, gap=gap)

    def _pool(self, one, *, runs: int, workers: int, gap) -> None:
        """Keep `workers` runs in flight (each takes a working slot when it works), starting
        a new one as one ends; forever with --runs 0, spaced by `gap()` seconds."""
        started, inflight = 0, set()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            while runs == 0 or started < runs or inflight:
                for future in [f for f in inflight if f.done()]:
                    inflight.discard(future)
                    self.stdout.write(f"  run {future.result()}")
                if len(inflight) < workers and (runs == 0 or started < runs):
                    inflight.add(pool.submit(one))
                    started += 1
                    time.sleep(gap())
                elif inflight:
                    wait(inflight, return_when=FIRST_COMPLETED)
