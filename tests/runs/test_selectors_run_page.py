"""runs/selectors_pages/run_page.py: the context of each partial of the run page as values
(header and sub-runs, content parts, usage bars, todos, verdicts, steps, held calls)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import ApprovalStatus
from console.core.errors import Forbidden, NotFound
from runs import selectors_pages as pages
from runs.models import Handoff, Message, Step, ToolResult, Verdict
from tests.support.factories import ApprovalFactory, ConversationFactory, RunFactory

pytestmark = pytest.mark.django_db


# --- the run page ---


@pytest.fixture
def page_run(tenant_a):
    start = timezone.now() - timedelta(minutes=2)
    return RunFactory(
        tenant=tenant_a,
        external_id="run_page",
        role_ids=["editor"],
        conversation=ConversationFactory(tenant=tenant_a, external_id="c9"),
        limits={"costCeilingMinorUnits": 500, "maxSteps": 10, "wallClockTimeoutMs": 600000},
        cost_minor_units=250,
        steps=12,
        usage_by_model={
            "model-b": {"input_tokens": 3, "output_tokens": 2, "cost_minor_units": 50},
            "": {"input_tokens": 7, "output_tokens": 1, "cost_minor_units": 200},
        },
        input="refund order 7",
        result=None,
        todos=[
            {"id": "a", "content": "look up", "status": "done"},
            {"id": "b", "content": "refund", "status": "pending"},
            "not a todo",
        ],
        verdicts={
            "10:0": {"verdict": "blocked", "guard": "cards", "reason": "a card"},
            "2:1": {"verdict": "blocked", "guard": "pii", "reason": "an address"},
            "2:0": {"verdict": "flagged", "guard": "pii", "reason": "an email"},
            "final": {"verdict": "allowed", "guard": "tone", "reason": "fine"},
        },
        taint_summary={"untrustedInput": True, "exfil": False},
        started_at=start,
        finished_at=start + timedelta(minutes=2),
    )


def test_run_page_run_carries_what_the_header_needs(viewer_a, page_run, django_assert_num_queries):
    run = pages.run_page_run(viewer=viewer_a, run_id="run_page")
    assert run == page_run
    with django_assert_num_queries(0):
        assert (run.tenant.slug, run.agent.external_id, run.conversation.external_id) == (
            "tenant-a",
            page_run.agent.external_id,
            "c9",
        )
        assert run.principal.external_id == page_run.principal.external_id


def test_run_page_run_of_another_tenant_is_404_and_without_view_runs_403(
    reviewer_b, decide_key, page_run
):
    with pytest.raises(NotFound):
        pages.run_page_run(viewer=reviewer_b, run_id="run_page")
    with pytest.raises(Forbidden):
        pages.run_page_run(viewer=decide_key, run_id="run_page")


def test_the_header_lists_the_sub_runs_of_this_tenant_oldest_first(
    viewer_a, tenant_a, tenant_b, page_run
):
    later = RunFactory(
        tenant=tenant_a,
        external_id="run_child_2",
        parent_run_id="run_page",
        current_agent_id="billing-bot",
        started_at=page_run.started_at + timedelta(seconds=20),
    )
    RunFactory(
        tenant=tenant_a,
        external_id="run_child_1",
        parent_run_id="run_page",
        status="done",
        current_agent_id="helper-bot",
        started_at=page_run.started_at + timedelta(seconds=10),
    )
    RunFactory(tenant=tenant_b, external_id="run_theirs", parent_run_id="run_page")
    header = pages.run_header_context(viewer=viewer_a, run=page_run)
    assert header["sub_runs"] == [
        {"external_id": "run_child_1", "status": "done", "current_agent_id": "helper-bot"},
        {"external_id": later.external_id, "status": "running", "current_agent_id": "billing-bot"},
    ]
    assert (header["run"], header["roles"]) == (page_run, ["editor"])
    assert header["input"] == [
        {"kind": "text", "text": "refund order 7", "long": False, "size": 14}
    ]
    assert header["result"] is None


PNG = "iVBORw0KGgo="  # 8 bytes


@pytest.mark.parametrize(
    "content, parts",
    [
        ("hi", [{"kind": "text", "text": "hi", "long": False, "size": 2}]),
        ("x" * 1201, [{"kind": "text", "text": "x" * 1201, "long": True, "size": 1201}]),
        (
            [{"type": "text", "text": "hi"}, {"type": "json", "value": {"k": 1}}],
            [
                {"kind": "text", "text": "hi", "long": False, "size": 2},
                {"kind": "json", "json": '{\n  "k": 1\n}', "long": False, "size": 12},
            ],
        ),
        ({"ask": "x"}, [{"kind": "json", "json": '{\n  "ask": "x"\n}', "long": False, "size": 16}]),
        ([1, 2], [{"kind": "json", "json": "[\n  1,\n  2\n]", "long": False, "size": 12}]),
        (
            [{"type": "image", "mediaType": "image/PNG", "data": {"$bytes": PNG}}],
            [
                {
                    "kind": "image",
                    "media_type": "image/PNG",
                    "src": f"data:image/png;base64,{PNG}",
                    "href": None,
                    "size": 8,
                }
            ],
        ),
        (
            [{"type": "image", "mediaType": "image/svg+xml", "data": {"$bytes": PNG}}],
            [
                {
                    "kind": "image",
                    "media_type": "image/svg+xml",
                    "src": None,
                    "href": None,
                    "size": 8,
                }
            ],
        ),
        (
            [{"type": "file", "mediaType": "image/png", "data": {"$bytes": PNG}}],
            [{"kind": "file", "media_type": "image/png", "src": None, "href": None, "size": 8}],
        ),
        (
            [{"type": "image", "data": {"$bytes": "not base64!"}}],
            [
                {
                    "kind": "image",
                    "media_type": "application/octet-stream",
                    "src": None,
                    "href": None,
                    "size": None,
                }
            ],
        ),
        (
            [{"type": "image", "mediaType": "image/png", "data": {"$url": "https://x.example/a"}}],
            [
                {
                    "kind": "image",
                    "media_type": "image/png",
                    "src": None,
                    "href": "https://x.example/a",
                    "size": None,
                    "url_text": "https://x.example/a",
                }
            ],
        ),
        (
            [{"type": "file", "mediaType": "text/html", "data": {"$url": "javascript:alert(1)"}}],
            [
                {
                    "kind": "file",
                    "media_type": "text/html",
                    "src": None,
                    "href": None,  # only web addresses are links
                    "size": None,
                    "url_text": "javascript:alert(1)",
                }
            ],
        ),
        (
            [{"type": "audio", "x": 1}],
            [
                {
                    "kind": "json",
                    "json": '{\n  "type": "audio",\n  "x": 1\n}',
                    "long": False,
                    "size": 31,
                }
            ],
        ),
    ],
)
def test_content_is_shown_as_parts_the_template_knows(viewer_a, tenant_a, content, parts):
    run = RunFactory(tenant=tenant_a, input=content, result=content)
    header = pages.run_header_context(viewer=viewer_a, run=run)
    assert header["input"] == parts
    assert header["result"] == parts


def test_json_longer_than_thirty_lines_is_collapsed(viewer_a, tenant_a):
    run = RunFactory(tenant=tenant_a, input={f"k{i}": i for i in range(30)})
    [part] = pages.run_header_context(viewer=viewer_a, run=run)["input"]
    assert (part["kind"], part["long"]) == ("json", True)


def test_usage_shows_each_limit_as_a_bar_and_usage_per_model(viewer_a, page_run):
    usage = pages.run_usage_context(viewer=viewer_a, run=page_run)
    assert usage["bars"] == [
        {"label": "Cost", "value": 250, "limit": 500, "unit": "money", "max": 500, "over": False},
        {"label": "Steps", "value": 12, "limit": 10, "unit": "count", "max": 12, "over": True},
        {
            "label": "Time",
            "value": 120000,
            "limit": 600000,
            "unit": "ms",
            "max": 600000,
            "over": False,
        },
    ]
    assert usage["by_model"] == [
        {"model": "(unnamed)", "input_tokens": 7, "output_tokens": 1, "cost_minor_units": 200},
        {"model": "model-b", "input_tokens": 3, "output_tokens": 2, "cost_minor_units": 50},
    ]
    assert (usage["usage"], usage["currency"]) == (page_run.usage, "USD")


def test_usage_bars_without_limits_are_never_over(viewer_a, tenant_a):
    run = RunFactory(tenant=tenant_a, limits={}, cost_minor_units=0, steps=3)
    bars = pages.run_usage_context(viewer=viewer_a, run=run)["bars"]
    assert [(b["label"], b["limit"], b["max"], b["over"]) for b in bars[:2]] == [
        ("Cost", None, 1, False),
        ("Steps", None, 3, False),
    ]
    assert bars[2]["value"] >= 0 and bars[2]["over"] is False  # a running run: time so far


def test_todos_are_the_runs_todo_items_with_how_many_are_done(viewer_a, page_run):
    todos = pages.run_todos_context(viewer=viewer_a, run=page_run)
    assert todos["todos"] == [
        {"id": "a", "content": "look up", "status": "done"},
        {"id": "b", "content": "refund", "status": "pending"},
    ]
    assert todos["todos_done"] == 1


def test_verdicts_are_ordered_by_turn_with_their_history(viewer_a, page_run):
    older = Verdict.objects.create(run=page_run, turn="2:1", verdict="flagged", guard="pii")
    newer = Verdict.objects.create(run=page_run, turn="2:1", verdict="blocked", guard="pii")
    context = pages.run_verdicts_context(viewer=viewer_a, run=page_run)
    assert [(v["turn"], v["verdict"]) for v in context["verdicts"]] == [
        ("2:0", "flagged"),
        ("2:1", "blocked"),
        ("10:0", "blocked"),  # by number, not as text
        ("final", "allowed"),
    ]
    assert [v["history"] for v in context["verdicts"]] == [[], [older, newer], [], []]
    assert context["blocked_count"] == 2
    assert context["taint"] == [("exfil", False), ("untrustedInput", True)]
    assert context["taint_raw"] == {"untrustedInput": True, "exfil": False}


# --- steps ---


@pytest.fixture
def stepped(page_run):
    at = page_run.started_at
    Step.objects.create(run=page_run, number=2, agent_id="billing-bot", model="m")
    Step.objects.create(run=page_run, number=1, agent_id="support-bot", model="m")
    Message.objects.create(run=page_run, position=0, role="user", content="hello", created_at=at)
    Message.objects.create(
        run=page_run,
        position=1,
        step=1,
        role="assistant",
        content=[{"type": "text", "text": "looking"}],
        tool_calls=[
            {"id": "call_1", "name": "lookup", "arguments": {"id": 7}},
            {"id": "call_2", "name": "refund", "arguments": {}},
            "not a call",
        ],
        created_at=at + timedelta(seconds=1),
    )
    Handoff.objects.create(
        run=page_run,
        step=1,
        from_agent_id="support-bot",
        to_agent_id="billing-bot",
        created_at=at + timedelta(seconds=2),
    )
    Message.objects.create(
        run=page_run,
        position=2,
        step=1,
        role="tool",
        content="no invoice",
        tool_call_id="call_1",
        created_at=at + timedelta(seconds=3),
    )
    ToolResult.objects.create(
        run=page_run, step=1, tool_call_id="call_1", tool_name="lookup", result="no", is_error=True
    )
    Message.objects.create(
        run=page_run, position=3, step=2, role="assistant", content="done", created_at=at
    )
    return page_run


def test_steps_hold_their_messages_and_handoffs_in_time_order(viewer_a, stepped):
    steps = pages.run_steps_context(viewer=viewer_a, run=stepped)["steps"]
    assert [(s["number"], s["row"] and s["row"].agent_id) for s in steps] == [
        (0, None),  # what came before step 1
        (1, "support-bot"),
        (2, "billing-bot"),
    ]
    assert [[i["kind"] for i in s["items"]] for s in steps] == [
        ["message"],
        ["message", "handoff", "message"],
        ["message"],
    ]
    first, handoff, tool = steps[1]["items"]
    assert handoff["handoff"].to_agent_id == "billing-bot"
    assert (first["role"], first["parts"][0]["text"], first["tool_call_id"]) == (
        "assistant",
        "looking",
        None,
    )
    assert (tool["role"], tool["tool_call_id"]) == ("tool", "call_1")


def test_a_tool_call_is_shown_with_its_result_when_there_is_one(viewer_a, stepped):
    steps = pages.run_steps_context(viewer=viewer_a, run=stepped)["steps"]
    calls = steps[1]["items"][0]["tool_calls"]
    assert calls == [
        {
            "id": "call_1",
            "name": "lookup",
            "arguments": {"json": '{\n  "id": 7\n}', "long": False, "size": 13},
            "result": {"json": '"no"', "long": False, "size": 4},
            "is_error": True,
            "has_result": True,
        },
        {
            "id": "call_2",
            "name": "refund",
            "arguments": {"json": "{}", "long": False, "size": 2},
            "result": None,
            "is_error": False,
            "has_result": False,
        },
    ]


@pytest.mark.parametrize(
    "number, kinds", [(1, ["message", "handoff", "message"]), (0, ["message"])]
)
def test_one_step_is_that_step_alone(viewer_a, stepped, number, kinds):
    context = pages.run_step_context(viewer=viewer_a, run=stepped, number=number)
    assert context["run"] == stepped
    assert context["step"]["number"] == number
    assert [i["kind"] for i in context["step"]["items"]] == kinds


def test_a_step_the_run_does_not_have_is_404(viewer_a, stepped):
    with pytest.raises(NotFound) as caught:
        pages.run_step_context(viewer=viewer_a, run=stepped, number=9)
    assert (caught.value.code, caught.value.message) == (
        "step_not_found",
        "run 'run_page' has no step 9",
    )


# --- held calls on the run page ---


def test_the_runs_held_calls_are_pending_first_then_decided_each_in_request_order(
    reviewer_a, page_run
):
    now = timezone.now()

    def call(minutes_ago, **fields):
        return ApprovalFactory(
            run=page_run, requested_at=now - timedelta(minutes=minutes_ago), **fields
        )

    late_pending = call(1)
    decided = call(5, status=ApprovalStatus.DENIED, decided_at=now)
    early_pending = call(3)
    expired = call(10, expires_at=now - timedelta(seconds=1))
    context = pages.run_approvals_context(viewer=reviewer_a, run=page_run)
    assert [(c["id"], c["pending"]) for c in context["cards"]] == [
        (early_pending.public_id, True),
        (late_pending.public_id, True),
        (expired.public_id, False),  # past its expiry: expired on the way, never shown pending
        (decided.public_id, False),
    ]
    assert context["pending_count"] == 2
    assert [c["can_decide"] for c in context["cards"]] == [True, True, False, False]
    expired.refresh_from_db()
    assert expired.status == "expired"


def test_the_run_page_shows_a_viewer_the_calls_without_controls(viewer_a, page_run):
    ApprovalFactory(run=page_run)
    [card] = pages.run_approvals_context(viewer=viewer_a, run=page_run)["cards"]
    assert (card["pending"], card["can_decide"], card["refusal"]) == (
        True,
        False,
        "you may not decide approvals",
    )


def test_held_calls_of_another_tenants_run_are_never_shown(reviewer_a, tenant_b):
    theirs = RunFactory(tenant=tenant_b)
    ApprovalFactory(run=theirs)
    context = pages.run_approvals_context(viewer=reviewer_a, run=theirs)
    assert (context["cards"], context["pending_count"]) == ([], 0)


def test_the_run_page_is_every_partials_context_merged(viewer_a, stepped):
    assert list(pages.PARTIALS) == [
        "run-header",
        "run-usage",
        "steps",
        "run-todos",
        "run-verdicts",
        "run-approvals",
    ]
    ApprovalFactory(run=stepped)
    context = pages.run_page_context(viewer=viewer_a, run_id="run_page")
    assert (context["run"], context["nav_active"]) == (stepped, "runs")
    for name, build in pages.PARTIALS.items():
        part = build(viewer=viewer_a, run=stepped)
        for key, value in part.items():
            if key == "cards":  # seconds left move on between the two reads
                assert [c["id"] for c in context[key]] == [c["id"] for c in value], name
            else:
                assert context[key] == value, (name, key)


def test_the_run_page_of_another_tenants_run_is_404(reviewer_b, page_run):
    with pytest.raises(NotFound):
        pages.run_page_context(viewer=reviewer_b, run_id="run_page")
