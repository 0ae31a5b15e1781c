"""runs/selectors_pages/run_list.py: the run list's context as values (filters, grouping by
principal or conversation, rows, keyset pages both ways, another tenant's runs never seen)."""

from datetime import UTC, datetime, time, timedelta

import pytest
from django.utils import timezone

from approvals.models import ApprovalStatus
from console.core.errors import Forbidden, Invalid, NotFound
from runs import selectors_pages as pages
from runs.models import RunStatus
from tests.support.factories import (
    AgentFactory,
    ApprovalFactory,
    ConversationFactory,
    PrincipalFactory,
    RunFactory,
)

pytestmark = pytest.mark.django_db

DAY0 = datetime(2026, 1, 1, tzinfo=UTC)


def listed(context):
    return [row["run"].external_id for group in context["groups"] for row in group["runs"]]


def list_of(viewer, **filters):
    return pages.runs_list_context(viewer=viewer, filters=pages.RunFilters(**filters))


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
