"""Playwright helpers for the browser tests (tests/browser/conftest.py holds their fixtures):
Debian's chromium, screenshots, signing in, demo data."""

import sys
import threading
import traceback
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

CHROMIUM = "/usr/bin/chromium"


ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


# pytest-django's live server speaks HTTP only: every page's live pill would read
# "reconnecting…" in a screenshot, which no running console shows. Screenshots leave it out
# (through the CSSOM: the CSP refuses an inline style sheet).
LIVE_PILL = """(hidden) => {
  const pill = document.getElementById('live-status');
  if (pill) pill.style.visibility = hidden ? 'hidden' : '';
}"""


class OpenRequests:
    """The requests a page has sent and not yet seen finish or fail, for a timeout's message:
    a navigation that never reached its load event names what it still waited for."""

    def __init__(self, page):
        self.open: dict[int, str] = {}
        page.on("request", lambda r: self.open.__setitem__(id(r), f"{r.method} {r.url}"))
        page.on("requestfinished", lambda r: self.open.pop(id(r), None))
        page.on("requestfailed", lambda r: self.open.pop(id(r), None))

    def __str__(self) -> str:
        return ", ".join(sorted(self.open.values())) or "none"


def server_threads() -> str:
    """Where every other thread of this process is now: pytest-django's live server answers
    in threads of the test's own process, so a request that hangs there shows its stack."""
    frames = sys._current_frames()
    lines = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident)
        if thread is threading.current_thread() or frame is None:
            continue
        stack = "".join(traceback.format_stack(frame)[-12:])
        lines.append(f"--- thread {thread.name}\n{stack}")
    return "\n".join(lines)


def navigation_hung(what: str, requests: OpenRequests) -> AssertionError:
    """A timed-out navigation's failure: `what` did not happen, what the page still waited
    for, and where the live server's threads were."""
    return AssertionError(
        f"{what}; requests still open: {requests}; the live server's threads:\n{server_threads()}"
    )


def screenshot(page, path: Path, *, full_page: bool = True) -> Path:
    """The page as it looks, but for the live pill (see LIVE_PILL), which stays as it was."""
    page.evaluate(LIVE_PILL, True)
    try:
        page.screenshot(path=str(path), full_page=full_page)
    finally:
        page.evaluate(LIVE_PILL, False)
    return path


def shot(page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return screenshot(page, SCREENSHOTS / f"{name}.png", full_page=full_page)


def sign_in(page, username: str, password: str, next_path: str = "/runs/") -> None:
    page.goto(f"{page.base_url}{next_path}")
    page.get_by_label("Email", exact=True).fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(f"**{next_path}")


def demo_runs(tenant, n: int = 36):
    """A varied list: principals, conversations (some none), agents, statuses, costs."""
    from runs.models import RunStatus
    from tests.support.factories import (
        AgentFactory,
        ApprovalFactory,
        ConversationFactory,
        PrincipalFactory,
        RunFactory,
    )

    now = timezone.now()
    people = [
        PrincipalFactory(tenant=tenant, external_id=f"{name}@example.com", name=name.title())
        for name in ("alice", "bob", "carol")
    ]
    agents = [AgentFactory(tenant=tenant, external_id=a) for a in ("support-bot", "billing-bot")]
    convs = [ConversationFactory(tenant=tenant, external_id=f"conv_{i}") for i in range(4)]
    statuses = [
        RunStatus.DONE,
        RunStatus.RUNNING,
        RunStatus.AWAITING_APPROVAL,
        RunStatus.FAILED,
        RunStatus.DONE,
        RunStatus.ABORTED,
    ]
    runs = []
    for i in range(n):
        status = statuses[i % len(statuses)]
        run = RunFactory(
            tenant=tenant,
            external_id=f"run_{i:04d}",
            agent=agents[i % 2],
            agent_version=1 + i % 3,
            current_agent_id="billing-bot" if i % 5 == 0 else agents[i % 2].external_id,
            principal=None if i % 11 == 0 else people[i % 3],
            conversation=None if i % 4 == 0 else convs[i % 4],
            status=status,
            steps=1 + i % 7,
            cost_minor_units=17 * (i % 30),
            limits={"costCeilingMinorUnits": 500, "maxSteps": 10} if i % 3 else {},
            started_at=now - timedelta(minutes=7 * i),
        )
        if status == RunStatus.AWAITING_APPROVAL:
            ApprovalFactory(run=run, tool_name="refund_payment")
        runs.append(run)
    return runs


def demo_run_page(tenant):
    """One rich run: every section of the run page has something to show."""
    from runs.models import Handoff, Message, Step, ToolResult, Verdict
    from tests.support.factories import (
        ApprovalFactory,
        ConversationFactory,
        PrincipalFactory,
        RunFactory,
    )

    now = timezone.now()
    alice = PrincipalFactory(tenant=tenant, external_id="alice@example.com", name="Alice Ng")
    RunFactory(tenant=tenant, external_id="run_parent_1", principal=alice)
    run = RunFactory(
        tenant=tenant,
        external_id="run_demo_42",
        principal=alice,
        parent_run_id="run_parent_1",
        role_ids=["editor", "billing"],
        conversation=ConversationFactory(tenant=tenant, external_id="conv_support_981"),
        status="awaiting_approval",
        limits={"costCeilingMinorUnits": 500, "maxSteps": 10, "wallClockTimeoutMs": 600000},
        cost_minor_units=186,
        input_tokens=5210,
        output_tokens=640,
        steps=3,
        usage_by_model={
            "model-large": {"input_tokens": 4100, "output_tokens": 520, "cost_minor_units": 160},
            "model-small": {"input_tokens": 1110, "output_tokens": 120, "cost_minor_units": 26},
        },
        todos=[
            {"id": "t1", "content": "Find the customer's last invoice", "status": "done"},
            {"id": "t2", "content": "Check the refund policy", "status": "in_progress"},
            {"id": "t3", "content": "Refund the duplicate charge", "status": "pending"},
        ],
        verdicts={
            "1:0": {"verdict": "allowed", "guard": "pii-guard", "reason": ""},
            "2:0": {"verdict": "blocked", "guard": "pii-guard", "reason": "quotes a card number"},
        },
        taint_summary={"untrustedWebContent": True, "sensitiveSinkExposed": False},
        trace_ids=["trace-7f3a", "trace-8b21", "trace-9c02"],
        started_at=now - timedelta(minutes=3),
    )
    RunFactory(tenant=tenant, external_id="run_child_billing", parent_run_id="run_demo_42")
    for n, (agent, model) in enumerate(
        [
            ("support-bot", "model-large"),
            ("billing-bot", "model-large"),
            ("support-bot", "model-small"),
        ],
        start=1,
    ):
        Step.objects.create(
            run=run,
            number=n,
            agent_id=agent,
            model=model,
            input_tokens=1700,
            output_tokens=210,
            cost_minor_units=62,
            finish_reason="tool_calls",
            trace_id=f"trace-{n}",
            started_at=now - timedelta(minutes=3 - n),
            finished_at=now - timedelta(minutes=3 - n),
        )
    at = now - timedelta(minutes=3)
    messages = [
        (None, "system", "You are a careful support agent.", None, None),
        (None, "user", "I was charged twice for order 4411 <b>please</b> refund one.", None, None),
        (
            1,
            "assistant",
            [
                {"type": "text", "text": "Let me look up the invoice."},
                {"type": "image", "mediaType": "image/png", "data": {"$bytes": PIXEL}},
                {
                    "type": "image",
                    "mediaType": "image/png",
                    "data": {"$url": "https://cdn.example/receipt.png"},
                },
            ],
            [{"id": "call_1", "name": "lookup_invoice", "arguments": {"order": 4411}}],
            None,
        ),
        (1, "tool", '{"invoice": "INV-88", "charges": 2}', None, "call_1"),
        (
            2,
            "assistant",
            [{"type": "json", "value": {"policy": "refund duplicates", "window_days": 30}}],
            [{"id": "call_2", "name": "fetch_policy", "arguments": {"topic": "refunds"}}],
            None,
        ),
        (
            3,
            "assistant",
            "The charge is a duplicate. " * 80,
            [
                {
                    "id": "call_3",
                    "name": "refund_payment",
                    "arguments": {"invoice": "INV-88", "amount": 4200},
                }
            ],
            None,
        ),
    ]
    for position, (step, role, content, calls, call_id) in enumerate(messages):
        Message.objects.create(
            run=run,
            position=position,
            step=step,
            role=role,
            content=content,
            tool_calls=calls,
            tool_call_id=call_id,
            created_at=at + timedelta(seconds=10 * position),
        )
    ToolResult.objects.create(
        run=run,
        step=1,
        tool_call_id="call_1",
        tool_name="lookup_invoice",
        result={"invoice": "INV-88", "charges": 2},
        created_at=at + timedelta(seconds=25),
    )
    ToolResult.objects.create(
        run=run,
        step=2,
        tool_call_id="call_2",
        tool_name="fetch_policy",
        result={"error": "policy service timed out"},
        is_error=True,
        created_at=at + timedelta(seconds=45),
    )
    Handoff.objects.create(
        run=run,
        step=1,
        from_agent_id="support-bot",
        to_agent_id="billing-bot",
        child_run_id="run_child_billing",
        created_at=at + timedelta(seconds=35),
    )
    Handoff.objects.create(
        run=run,
        step=2,
        kind="returned",
        from_agent_id="billing-bot",
        to_agent_id="support-bot",
        created_at=at + timedelta(seconds=48),
    )
    Verdict.objects.create(run=run, turn="2:0", verdict="flagged", guard="pii-guard")
    Verdict.objects.create(run=run, turn="2:0", verdict="blocked", guard="pii-guard")
    ApprovalFactory(
        run=run,
        step=3,
        tool_call_id="call_3",
        tool_name="refund_payment",
        arguments={"invoice": "INV-88", "amount": 4200},
        reason="refunds over 20.00 need a human",
    )
    return run


def _png(width: int = 96, height: int = 48) -> str:
    """A small gradient PNG, base64, as a runtime would send it in a `$bytes` envelope."""
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(
        b"\x00" + b"".join(bytes((40 + x * 2, 90 + y * 3, 200)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
    return base64.b64encode(png + chunk(b"IEND", b"")).decode()


PIXEL = _png()
