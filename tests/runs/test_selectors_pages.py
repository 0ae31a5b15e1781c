"""runs/selectors_pages.py: the context of each partial of the run list and the run page
(filters, grouping, ordering, keyset pages, another tenant's runs never seen), as values."""

from datetime import UTC, datetime, time, timedelta

import pytest
from django.utils import timezone

from approvals.models import ApprovalStatus
from console.errors import Forbidden, Invalid, NotFound
from console.models import ApiKey
from runs import selectors_pages as pages
from runs.models import Handoff, Message, RunStatus, Step, ToolResult, Verdict
from tests.factories import (
    AgentFactory,
    ApprovalFactory,
    ConversationFactory,
    PrincipalFactory,
    RunFactory,
    make_key,
)

pytestmark = pytest.mark.django_db

DAY0 = datetime(2026, 1, 1, tzinfo=UTC)


def listed(context):
    return [row["run"].external_id for group in context["groups"] for row in group["runs"]]


def list_of(viewer, **filters):
    return pages.runs_list_context(viewer=viewer, filters=pages.RunFilters(**filters))


@pytest.fixture
def decide_key(tenant_a, reviewer_a):
    return ApiKey.objects.for_raw_key(make_key(tenant_a, scopes=("decide",), principal=reviewer_a))


@pytest.fixture
def listing(tenant_a, tenant_b):
    """Four runs of tenant A a day apart at noon (newest: run_3) and a newer one of tenant B
    with the same principal, conversation and agent ids."""
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@example.com", name="Alice")
    bob = PrincipalFactory(tenant=tenant_a, external_id="bob@example.com", name="")
    support = AgentFactory(tenant=tenant_a, external_id="support-bot")
    billing = AgentFactory(tenant=tenant_a, external_id="billing-bot")
    c1 = ConversationFactory(tenant=tenant_a, external_id="c1")
    c2 = ConversationFactory(tenant=tenant_a, external_id="c2")
    specs = [
        ("run_0", alice, c1, support, "running"),
        ("run_1", bob, None, billing, "done"),
        ("job_2", None, c1, support, "failed"),
        ("run_3", alice, c2, billing, "awaiting_approval"),
    ]
    runs = {
        run_id: RunFactory(
            tenant=tenant_a,
            external_id=run_id,
            principal=principal,
            conversation=conversation,
            agent=agent,
            status=status,
            started_at=DAY0 + timedelta(days=i, hours=12),
        )
        for i, (run_id, principal, conversation, agent, status) in enumerate(specs)
    }
    RunFactory(
        tenant=tenant_b,
        external_id="run_b",
        principal=PrincipalFactory(tenant=tenant_b, external_id="alice@example.com"),
        conversation=ConversationFactory(tenant=tenant_b, external_id="c1"),
        agent=AgentFactory(tenant=tenant_b, external_id="billing-bot"),
        started_at=DAY0 + timedelta(days=9),
    )
    AgentFactory(tenant=tenant_b, external_id="b-only-bot")
    return runs


# --- the run list ---


def test_the_list_is_newest_first_grouped_by_principal_in_order_of_their_newest_run(
    viewer_a, listing
):
    context = list_of(viewer_a)
    assert [(g["key"], g["label"], g["none"]) for g in context["groups"]] == [
        ("alice@example.com", "Alice (alice@example.com)", False),
        (None, "no principal", True),
        ("bob@example.com", "bob@example.com", False),  # no name: the id alone
    ]
    assert [[row["run"].external_id for row in g["runs"]] for g in context["groups"]] == [
        ["run_3", "run_0"],
        ["job_2"],
        ["run_1"],
    ]
    assert (context["run_count"], context["group_by"]) == (4, "principal")


def test_the_list_grouped_by_conversation(viewer_a, listing):
    context = list_of(viewer_a, group="conversation")
    assert [(g["key"], g["label"]) for g in context["groups"]] == [
        ("c2", "c2"),
        ("c1", "c1"),
        (None, "no conversation"),
    ]
    assert listed(context) == ["run_3", "job_2", "run_0", "run_1"]


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"principal": "alice@example.com"}, ["run_3", "run_0"]),
        ({"no_principal": True}, ["job_2"]),
        ({"no_principal": True, "principal": "alice@example.com"}, ["job_2"]),
        ({"conversation": "c1"}, ["job_2", "run_0"]),
        ({"no_conversation": True}, ["run_1"]),
        ({"agent": "billing-bot"}, ["run_3", "run_1"]),
        ({"agent": "nobody-bot"}, []),
        ({"agent": "b-only-bot"}, []),  # another tenant's agent id matches nothing here
        ({"status": "failed"}, ["job_2"]),
        ({"since": (DAY0 + timedelta(days=2)).date()}, ["run_3", "job_2"]),
        ({"until": (DAY0 + timedelta(days=1)).date()}, ["run_1", "run_0"]),
        (
            {
                "since": (DAY0 + timedelta(days=1)).date(),
                "until": (DAY0 + timedelta(days=1)).date(),
            },
            ["run_1"],
        ),
        ({"q": "run_"}, ["run_3", "run_1", "run_0"]),
        ({"q": "job"}, ["job_2"]),
        ({"q": "un_"}, []),  # a prefix of the id, not a substring
        ({"principal": "alice@example.com", "status": "running"}, ["run_0"]),
    ],
)
def test_the_list_filters(viewer_a, listing, filters, expected):
    assert listed(list_of(viewer_a, group="conversation", **filters)) == expected


def test_since_and_until_are_whole_utc_days_both_inclusive(viewer_a, tenant_a):
    day = DAY0.date()
    for run_id, moment in [
        ("before", DAY0 - timedelta(microseconds=1)),
        ("first", DAY0),
        ("last", datetime.combine(day, time.max, tzinfo=UTC)),
        ("after", DAY0 + timedelta(days=1)),
    ]:
        RunFactory(tenant=tenant_a, external_id=run_id, started_at=moment)
    assert listed(list_of(viewer_a, since=day, until=day)) == ["last", "first"]


def test_an_agent_id_both_tenants_hold_filters_by_this_tenants_agent(viewer_a, tenant_a, tenant_b):
    theirs = AgentFactory(tenant=tenant_b, external_id="shared-bot")  # the older row
    RunFactory(tenant=tenant_b, agent=theirs)
    mine = RunFactory(
        tenant=tenant_a, agent=AgentFactory(tenant=tenant_a, external_id="shared-bot")
    )
    assert listed(list_of(viewer_a, agent="shared-bot")) == [mine.external_id]


def test_another_tenants_runs_are_never_listed(viewer_a, reviewer_b, listing):
    assert "run_b" not in listed(list_of(viewer_a))
    assert listed(list_of(viewer_a, principal="alice@example.com")) == ["run_3", "run_0"]
    assert listed(list_of(reviewer_b)) == ["run_b"]


def test_the_list_is_forbidden_to_a_decide_key(decide_key, listing):
    with pytest.raises(Forbidden):
        list_of(decide_key)


def test_the_list_names_the_tenants_currency_and_the_statuses(viewer_a, tenant_a, listing):
    tenant_a.currency = "EUR"
    tenant_a.save(update_fields=["currency"])
    viewer_a.tenant.refresh_from_db()
    filters = pages.RunFilters(status="done")
    context = pages.runs_list_context(viewer=viewer_a, filters=filters)
    assert (context["filters"], context["currency"]) == (filters, "EUR")
    assert context["statuses"] == RunStatus.choices


def test_a_row_holds_every_fact_the_list_shows(viewer_a, tenant_a):
    run = RunFactory(
        tenant=tenant_a,
        external_id="run/7 x",
        agent=AgentFactory(tenant=tenant_a, external_id="support-bot"),
        current_agent_id="billing-bot",
        principal=PrincipalFactory(tenant=tenant_a, external_id="alice@example.com"),
        conversation=ConversationFactory(tenant=tenant_a, external_id="c1"),
        status="awaiting_approval",
        limits={"costCeilingMinorUnits": 100, "maxSteps": 5},
        cost_minor_units=250,
        started_at=timezone.now() - timedelta(hours=2, minutes=1),
    )
    ApprovalFactory(run=run)
    ApprovalFactory(run=run)
    ApprovalFactory(run=run, status=ApprovalStatus.DENIED)
    row = pages.run_row_context(viewer=viewer_a, run_id="run/7 x")["row"]
    assert row == {
        "run": run,
        "dom_id": f"run-row-{run.pk}",
        "href": "/runs/run%2F7%20x/",
        "status_label": "awaiting approval",
        "status_class": "is-warning",
        "agent": "support-bot",
        "current_agent": "billing-bot",
        "principal": "alice@example.com",
        "conversation": "c1",
        "max_steps": 5,
        "cost": "2.50",
        "ceiling": 100,
        "meter_max": 100,
        "ceiling_text": "1.00",
        "over_ceiling": True,
        "started_iso": run.started_at.isoformat(),
        "age": "2h",
    }
    assert row["run"].pending_calls == 2


def test_a_row_without_limits_principal_or_conversation(viewer_a, tenant_a):
    run = RunFactory(tenant=tenant_a, principal=None, conversation=None, cost_minor_units=7)
    row = pages.run_row_context(viewer=viewer_a, run_id=run.external_id)["row"]
    assert (row["principal"], row["conversation"], row["current_agent"]) == (None, None, None)
    assert (row["max_steps"], row["ceiling"], row["ceiling_text"], row["meter_max"]) == (
        None,
        None,
        None,
        1,
    )
    assert (row["cost"], row["over_ceiling"], row["run"].pending_calls) == ("0.07", False, 0)


def test_the_row_of_another_tenants_run_is_404_like_a_missing_one(reviewer_b, listing):
    for run_id in ("run_3", "run_missing"):
        with pytest.raises(NotFound) as caught:
            pages.run_row_context(viewer=reviewer_b, run_id=run_id)
        assert (caught.value.code, caught.value.message) == ("run_not_found", f"no run '{run_id}'")


def test_the_list_costs_two_queries_whatever_its_size(viewer_a, listing, django_assert_num_queries):
    for run in listing.values():
        ApprovalFactory(run=run)
    with django_assert_num_queries(2):  # the viewer's roles, the page
        context = list_of(viewer_a, limit=200)
        assert [row["run"].pending_calls for g in context["groups"] for row in g["runs"]] == [1] * 4


# --- keyset pages ---


@pytest.fixture
def five(tenant_a):
    """run_0 .. run_4 a minute apart (run_4 newest), made out of order: ids do not follow time."""
    made = {
        i: RunFactory(
            tenant=tenant_a, external_id=f"run_{i}", started_at=DAY0 + timedelta(minutes=i)
        )
        for i in (3, 0, 4, 1, 2)
    }
    return [made[i] for i in range(5)]


def page_of(viewer, **filters):
    context = list_of(viewer, limit=2, **filters)
    return listed(context), context["newer_cursor"], context["older_cursor"]


def test_pages_go_older_and_back_newer_by_keyset_cursors(viewer_a, five):
    cursor = {r.external_id: pages.cursor_for(r) for r in five}
    assert page_of(viewer_a) == (["run_4", "run_3"], None, cursor["run_3"])
    assert page_of(viewer_a, before=cursor["run_3"]) == (
        ["run_2", "run_1"],
        cursor["run_2"],
        cursor["run_1"],
    )
    assert page_of(viewer_a, before=cursor["run_1"]) == (["run_0"], cursor["run_0"], None)
    assert page_of(viewer_a, after=cursor["run_0"]) == (
        ["run_2", "run_1"],
        cursor["run_2"],
        cursor["run_1"],
    )
    assert page_of(viewer_a, after=cursor["run_2"]) == (["run_4", "run_3"], None, cursor["run_3"])


def test_pages_of_runs_started_at_the_same_moment_skip_and_repeat_nothing(viewer_a, five):
    for run in five:
        run.started_at = DAY0
        run.save(update_fields=["started_at"])
    seen, older = [], None
    while True:
        ids, _, older = page_of(viewer_a, **({"before": older} if older else {}))
        seen += ids
        if older is None:
            break
    assert seen == [r.external_id for r in sorted(five, key=lambda r: -r.pk)]  # ties: newest id
    newer, back = None, []
    while True:  # and back again, newer page by newer page
        ids, newer, _ = page_of(
            viewer_a, after=newer or pages.cursor_for(min(five, key=lambda r: r.pk))
        )
        back = ids + back
        if newer is None:
            break
    assert back == seen[:-1]  # every run newer than the oldest, once, in the list's order


def test_a_page_cursor_is_the_runs_start_to_the_microsecond_and_its_id(tenant_a):
    run = RunFactory(tenant=tenant_a, started_at=DAY0 + timedelta(seconds=1, microseconds=7))
    assert pages.cursor_for(run) == f"{1_000_007 + 1767225600 * 1_000_000}-{run.pk}"
    assert pages.cursor_parse(pages.cursor_for(run)) == (run.started_at, run.pk)


@pytest.mark.parametrize(
    "cursor", ["", "abc", "12", "12-", "-3", "1-2-3", "99999999999999999999-1"]
)
def test_a_page_cursor_that_is_not_one_is_invalid(cursor):
    with pytest.raises(Invalid) as caught:
        pages.cursor_parse(cursor)
    assert (caught.value.code, caught.value.message) == (
        "invalid_cursor",
        f"'{cursor}' is not a page cursor",
    )


def test_filters_replace_changes_a_copy():
    filters = pages.RunFilters(status="done", before="1-2")
    changed = pages.filters_replace(filters, before="", after="3-4")
    assert (changed.status, changed.before, changed.after) == ("done", "", "3-4")
    assert (filters.before, filters.after) == ("1-2", "")


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
            "3:0": "not a verdict",
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
