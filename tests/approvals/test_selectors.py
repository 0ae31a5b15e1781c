"""approvals/selectors.py, the reviewer's reads: the approval card's context, the approvals
list, the secret masking of a call's arguments; and the desk's list (selectors_desk) asked
what the grouped inbox it replaced was asked."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals import selectors, selectors_desk
from approvals.models import Approval, ApprovalStatus
from console.core.errors import Forbidden
from console.models import ApiKey, Role
from tests.support.factories import (
    AgentFactory,
    ApprovalFactory,
    PrincipalFactory,
    RunFactory,
    make_key,
)

pytestmark = pytest.mark.django_db

MAY_NOT_DECIDE = "you may not decide approvals"


def ids(approvals):
    return [a.public_id for a in approvals]


def held(run, *, minutes_ago=1, tool="email.send", **fields):
    """A call of the run held for a human, requested this many minutes ago."""
    requested = timezone.now() - timedelta(minutes=minutes_ago)
    return ApprovalFactory(run=run, tool_name=tool, requested_at=requested, **fields)


def decided(run, status=ApprovalStatus.APPROVED, **fields):
    return held(run, status=status, decided_at=timezone.now(), **fields)


def mail_decider(tenant):
    """A principal whose only role may decide `email.*` tools."""
    role = Role.objects.create(
        tenant=tenant, name="mail", capabilities=["view_runs", "decide"], decide_tools=["email.*"]
    )
    principal = PrincipalFactory(tenant=tenant)
    principal.roles.add(role)
    return principal


@pytest.fixture
def alice(tenant_a):
    return PrincipalFactory(tenant=tenant_a, external_id="alice@example.com", name="Alice")


@pytest.fixture
def bob(tenant_a):
    return PrincipalFactory(tenant=tenant_a, external_id="bob@example.com", name="Bob")


@pytest.fixture
def support_run(tenant_a, alice):
    agent = AgentFactory(tenant=tenant_a, external_id="support-bot")
    return RunFactory(tenant=tenant_a, external_id="run_support", agent=agent, principal=alice)


@pytest.fixture
def billing_run(tenant_a, bob):
    agent = AgentFactory(tenant=tenant_a, external_id="billing-bot")
    return RunFactory(tenant=tenant_a, external_id="run_billing", agent=agent, principal=bob)


@pytest.fixture
def run_b(tenant_b):
    return RunFactory(tenant=tenant_b, external_id="run_support")


# --- the desk's list (selectors_desk), as the old inbox's tests asked it ---


def listed(viewer, filters=None):
    """The calls the desk lists for this viewer, oldest first (one page holds them all)."""
    page = selectors_desk.desk_page(viewer=viewer, filters=filters, size=200)
    return [row["approval"] for row in page["rows"]]


def test_the_desk_is_the_tenants_pending_calls_oldest_first(
    reviewer_a, support_run, billing_run, run_b
):
    third = held(support_run, minutes_ago=3)
    first = held(billing_run, minutes_ago=5)
    second = held(support_run, minutes_ago=4)
    decided(support_run, minutes_ago=9)
    held(billing_run, minutes_ago=8, status=ApprovalStatus.CANCELLED)
    held(support_run, minutes_ago=7, mirror_of=first)  # the same call, listed once
    held(run_b, minutes_ago=6)  # another tenant's
    assert ids(listed(viewer=reviewer_a)) == ids([first, second, third])


def test_the_desk_expires_a_call_past_its_expiry_instead_of_listing_it(reviewer_a, support_run):
    live = held(support_run, minutes_ago=2)
    due = held(support_run, minutes_ago=20, expires_at=timezone.now() - timedelta(seconds=1))
    assert ids(listed(viewer=reviewer_a)) == ids([live])
    due.refresh_from_db()
    assert (due.status, due.message) == ("expired", due.rejection_message)


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({}, ["mail", "shell", "refund"]),
        ({"tool": "shell.exec"}, ["shell"]),
        ({"agent": "billing-bot"}, ["refund"]),
        ({"principal": "alice@example.com"}, ["mail", "shell"]),
        ({"run": "run_billing"}, ["refund"]),
        ({"tool": "email.send", "principal": "bob@example.com"}, []),
        ({"tool": "", "agent": ""}, ["mail", "shell", "refund"]),  # an empty filter is none
        ({"agent": "no-such-bot"}, []),
    ],
)
def test_the_desk_filters_by_tool_agent_principal_and_run(
    reviewer_a, support_run, billing_run, filters, expected
):
    calls = {
        "mail": held(support_run, minutes_ago=3, tool="email.send"),
        "shell": held(support_run, minutes_ago=2, tool="shell.exec"),
        "refund": held(billing_run, minutes_ago=1, tool="refund.issue"),
    }
    found = listed(viewer=reviewer_a, filters=filters)
    assert ids(found) == ids(calls[name] for name in expected)


def test_the_desk_lists_for_a_decider_only_the_calls_it_may_decide(tenant_a, support_run):
    decider = mail_decider(tenant_a)
    mail = held(support_run, minutes_ago=3, tool="email.send")
    held(support_run, minutes_ago=2, tool="shell.exec")  # no role of the decider's may
    own = RunFactory(tenant=tenant_a, principal=decider)
    held(own, minutes_ago=1, tool="email.send")  # a run for the decider: not theirs to decide
    assert ids(listed(viewer=decider)) == ids([mail])


def test_a_decide_key_lists_what_its_principal_may_decide(tenant_a, support_run):
    decider = mail_decider(tenant_a)
    key = ApiKey.objects.for_raw_key(make_key(tenant_a, scopes=("decide",), principal=decider))
    mail = held(support_run, minutes_ago=2, tool="email.send")
    held(support_run, minutes_ago=1, tool="shell.exec")
    assert ids(listed(viewer=key)) == ids([mail])


def test_the_desk_shows_a_viewer_every_pending_call_read_only(tenant_a, viewer_a, support_run):
    shell = held(support_run, minutes_ago=3, tool="shell.exec")
    own = held(RunFactory(tenant=tenant_a, principal=viewer_a), minutes_ago=2)
    assert ids(listed(viewer_a)) == ids([shell, own])
    page = selectors_desk.desk_page(viewer=viewer_a)
    assert page["decides"] is False and [r["decides"] for r in page["rows"]] == [False, False]
    cards = selectors.cards_context(approvals=[shell, own], viewer=viewer_a)
    assert [(c["can_decide"], c["refusal"]) for c in cards] == [(False, MAY_NOT_DECIDE)] * 2


def test_the_desk_is_forbidden_without_view_runs_or_decide_and_counts_nothing(
    tenant_a, support_run
):
    held(support_run)
    roleless = PrincipalFactory(tenant=tenant_a)
    with pytest.raises(Forbidden):
        listed(roleless)
    assert selectors_desk.desk_list_count(viewer=roleless) == {"count": 0, "decides": False}


def test_pending_calls_are_the_pending_ones_counting_a_mirrored_call_once(
    tenant_a, support_run, billing_run
):
    child = held(support_run)
    held(billing_run, mirror_of=child)
    decided(support_run)
    other = held(billing_run)
    found = selectors.pending_calls(Approval.objects.filter(tenant=tenant_a)).order_by("id")
    assert ids(found) == ids([child, other])


# --- approval_card_context ---


@pytest.fixture
def rich_run(tenant_a, alice):
    return RunFactory(
        tenant=tenant_a,
        principal=alice,
        role_ids=["editor"],
        current_agent_id="billing-bot",
        limits={"costCeilingMinorUnits": 500},
        cost_minor_units=120,
        todos=[{"id": "t1", "content": "Email Bob", "status": "in_progress"}],
        verdicts={
            "2:0": {"verdict": "blocked", "guard": "cards", "reason": "a card number"},
            "1:0": {"verdict": "flagged", "guard": "pii", "reason": "an address"},
            "1:1": {"verdict": "allowed", "guard": "pii", "reason": "fine"},
        },
        taint_summary={"untrustedInput": True, "secretRead": False, "exfil": True},
    )


def test_the_card_of_a_pending_call_holds_everything_a_reviewer_needs(reviewer_a, rich_run):
    arguments = {"to": "bob@example.com", "api_key": "sk-live-1234567890abcdef"}
    approval = held(
        rich_run, arguments=arguments, expires_at=timezone.now() + timedelta(minutes=10)
    )
    card = selectors.approval_card_context(approval=approval, viewer=reviewer_a, notice="Hi")[
        "card"
    ]
    assert card["approval"] == approval
    assert (card["id"], card["dom_id"]) == (approval.public_id, f"approval-{approval.public_id}")
    assert (card["run"], card["pending"], card["can_decide"], card["can_extend"]) == (
        rich_run,
        True,
        True,
        True,
    )
    assert (card["refusal"], card["notice"], card["pickup"], card["decided_by"]) == (
        None,
        "Hi",
        None,
        None,
    )
    assert card["argument_lines"] == selectors.json_lines(arguments)
    assert json.loads(card["arguments_json"]) == arguments and "\n  " in card["arguments_json"]
    assert (card["decided_argument_lines"], card["arguments_edited"]) == (None, False)
    assert 595 <= card["seconds_left"] <= 600
    assert card["principal"] == rich_run.principal and card["roles"] == ["editor"]
    assert card["agent_id"] == "billing-bot"  # the agent holding the run now
    assert (card["cost"], card["ceiling"], card["over_ceiling"], card["currency"]) == (
        120,
        500,
        False,
        "USD",
    )
    assert card["todos"] == [{"id": "t1", "content": "Email Bob", "status": "in_progress"}]
    assert card["verdicts"] == [  # only flagged and blocked turns, by turn
        {"turn": "1:0", "verdict": "flagged", "guard": "pii", "reason": "an address"},
        {"turn": "2:0", "verdict": "blocked", "guard": "cards", "reason": "a card number"},
    ]
    assert card["taint_flags"] == ["exfil", "untrustedInput"]


@pytest.mark.parametrize(
    "limits, cost, ceiling, over",
    [
        ({"costCeilingMinorUnits": 500}, 501, 500, True),
        ({"cost_ceiling_minor_units": 300}, 120, 300, False),  # the snake_case spelling
        ({}, 10_000, None, False),
    ],
)
def test_the_card_measures_the_runs_cost_against_its_ceiling(
    reviewer_a, tenant_a, limits, cost, ceiling, over
):
    approval = held(RunFactory(tenant=tenant_a, limits=limits, cost_minor_units=cost))
    card = selectors.approval_card_context(approval=approval, viewer=reviewer_a)["card"]
    assert (card["cost"], card["ceiling"], card["over_ceiling"]) == (cost, ceiling, over)


def test_the_card_of_a_run_without_facts_is_empty_not_broken(reviewer_a, tenant_a):
    run = RunFactory(tenant=tenant_a, current_agent_id="", verdicts={}, taint_summary=None)
    card = selectors.approval_card_context(approval=held(run), viewer=reviewer_a)["card"]
    assert card["agent_id"] == run.agent.external_id
    assert (card["todos"], card["verdicts"], card["taint_flags"], card["roles"]) == ([], [], [], [])


@pytest.mark.parametrize(
    "who, refusal",
    [
        ("viewer_a", MAY_NOT_DECIDE),
        (None, "sign in to decide"),
    ],
)
def test_the_card_shows_no_controls_to_who_may_not_decide_and_says_why(
    request, support_run, who, refusal
):
    approval = held(support_run)
    viewer = request.getfixturevalue(who) if who else None
    card = selectors.approval_card_context(approval=approval, viewer=viewer)["card"]
    assert (card["pending"], card["can_decide"], card["can_extend"], card["refusal"]) == (
        True,
        False,
        False,
        refusal,
    )


def test_a_call_extended_once_cannot_be_extended_again(reviewer_a, support_run):
    approval = held(support_run, extended_at=timezone.now())
    card = selectors.approval_card_context(approval=approval, viewer=reviewer_a)["card"]
    assert (card["can_decide"], card["can_extend"]) == (True, False)


@pytest.mark.parametrize(
    "delivered, pickup", [(False, "waiting"), (True, "resumed")], ids=["not picked up", "picked up"]
)
def test_a_decided_card_says_who_decided_and_whether_the_runtime_picked_it_up(
    reviewer_a, viewer_a, support_run, delivered, pickup
):
    approval = decided(
        support_run,
        decided_by=reviewer_a,
        delivered_at=timezone.now() if delivered else None,
        decided_arguments={"to": "bob@example.com", "subject": "Hi"},
    )
    for viewer in (reviewer_a, viewer_a):
        card = selectors.approval_card_context(approval=approval, viewer=viewer)["card"]
        assert (card["pending"], card["can_decide"], card["can_extend"]) == (False, False, False)
        assert card["refusal"] is None  # nothing left to refuse
        assert (card["decided_by"], card["pickup"]) == (reviewer_a, pickup)
        assert card["arguments_edited"] is False


def test_a_cancelled_card_has_no_pickup(reviewer_a, support_run):
    approval = held(support_run, status=ApprovalStatus.CANCELLED)
    card = selectors.approval_card_context(approval=approval, viewer=reviewer_a)["card"]
    assert (card["pending"], card["pickup"]) == (False, None)


def test_a_card_approved_with_edited_arguments_shows_both(reviewer_a, support_run):
    edited = {"to": "carol@example.com", "subject": "Hi"}
    approval = decided(support_run, decided_by=reviewer_a, decided_arguments=edited)
    card = selectors.approval_card_context(approval=approval, viewer=reviewer_a)["card"]
    assert card["arguments_edited"] is True
    assert card["decided_argument_lines"] == selectors.json_lines(edited)
    assert card["argument_lines"] == selectors.json_lines(approval.arguments)


def test_the_card_of_a_call_past_its_expiry_is_expired_first(reviewer_a, support_run):
    approval = held(support_run, minutes_ago=20, expires_at=timezone.now() - timedelta(seconds=5))
    card = selectors.approval_card_context(approval=approval, viewer=reviewer_a)["card"]
    assert (card["pending"], card["can_decide"], card["seconds_left"]) == (False, False, 0)
    assert card["approval"].status == "expired"
    assert Approval.objects.get(pk=approval.pk).status == "expired"


# --- json_lines and secret masking ---


def test_json_lines_lays_out_pretty_json_with_keys_depths_and_commas():
    lines = selectors.json_lines({"to": "bob", "cc": ["ann", "eve"], "n": 3, "empty": {}})
    assert [(line["pad"], line["key"], line["text"], line["comma"]) for line in lines] == [
        ("", None, "{", ""),
        ("  ", '"to"', '"bob"', ","),
        ("  ", '"cc"', "[", ""),
        ("    ", None, '"ann"', ","),
        ("    ", None, '"eve"', ""),
        ("  ", None, "]", ","),
        ("  ", '"n"', "3", ","),
        ("  ", '"empty"', "{}", ""),
        ("", None, "}", ""),
    ]
    assert not any(line["secret"] or line["long"] for line in lines)


def test_json_lines_of_a_scalar_is_one_line_keeping_unicode_and_stringifying_the_rest():
    assert [line["text"] for line in selectors.json_lines("café")] == ['"café"']
    when = timezone.datetime(2026, 12, 2, 10, 0)
    assert [line["text"] for line in selectors.json_lines(when)] == ['"2026-12-02 10:00:00"']
    assert [line["text"] for line in selectors.json_lines(None)] == ["null"]


def test_a_long_value_is_collapsed_after_160_characters():
    [opener, line, closer] = selectors.json_lines({"body": "x" * 400})
    assert line["long"] is True
    assert line["text"] == json.dumps("x" * 400)
    assert line["short"] == line["text"][:160] + "…"
    [short] = selectors.json_lines("y" * 10)
    assert (short["long"], short["short"]) == (False, short["text"])


@pytest.mark.parametrize(
    "key, value, secret",
    [
        ("password", "hunter2", True),
        ("passphrase", "correct horse", True),
        ("api_key", "abc", True),
        ("API-KEY", "abc", True),
        ("Authorization", "Basic YWxhZGRpbjpvcGVu", True),
        ("client_secret", "abc", True),
        ("private_key", "abc", True),
        ("session_id", 42, True),  # a number under a secret name is masked too
        ("cookie", "a=b", True),
        ("token", None, False),  # nothing to hide
        ("token", "", False),
        ("secret", True, False),
        ("secret", False, False),
        ("to", "bob@example.com", False),
        ("count", 42, False),
        ("note", "sk-live-1234567890abcdef", True),  # a secret-looking value under any name
        ("note", "sk-short", False),
        ("note", "ghp_abcdefgh1234", True),
        ("note", "xoxb-12345678", True),
        ("note", "AKIAABCDEFGHIJKLMNOP", True),
        ("note", "Bearer abcdefgh1234", True),
        ("note", "eyJhbGciOiJIUzI1NiJ9.e30.sig", True),
        ("note", "-----BEGIN RSA PRIVATE KEY-----\nMIIE", True),
        ("note", "see sk-live-1234567890abcdef", False),  # only a whole value is a key
    ],
)
def test_secret_looking_values_are_masked(key, value, secret):
    [_, line, _] = selectors.json_lines({key: value})
    assert line["secret"] is secret


def test_a_secret_named_object_is_not_masked_whole_but_its_secret_members_are():
    lines = selectors.json_lines({"credentials": {"user": "ann", "password": "pw"}})
    by_key = {line["key"]: line["secret"] for line in lines if line["key"]}
    assert by_key == {'"credentials"': False, '"user"': False, '"password"': True}


def test_secret_looking_items_of_a_list_are_masked():
    lines = selectors.json_lines(["plain", "ghp_abcdefgh1234"])
    assert [line["secret"] for line in lines] == [False, False, True, False]


# --- approvals_list ---


def test_approvals_list_is_the_tenants_approvals_oldest_first_as_resources(
    reviewer_a, support_run, billing_run, run_b
):
    first = held(support_run, minutes_ago=3, tool_call_id="call_1")
    second = decided(billing_run, decided_by=reviewer_a, tool_call_id="call_2")
    held(run_b)
    listed = selectors.approvals_list(viewer=reviewer_a)
    assert listed["next_cursor"] is None
    assert [(i["id"], i["run_id"], i["tool_call_id"], i["status"]) for i in listed["items"]] == [
        (first.public_id, "run_support", "call_1", "pending"),
        (second.public_id, "run_billing", "call_2", "approved"),
    ]
    assert [i["decided_by"] for i in listed["items"]] == [None, "reviewer@a.example"]


@pytest.mark.parametrize(
    "status, run_id, expected",
    [
        ("pending", None, ["mail", "shell"]),
        ("approved", None, ["refund"]),
        ("denied", None, []),
        (None, "run_billing", ["refund"]),
        ("pending", "run_billing", []),
        (None, "no_such_run", []),
    ],
)
def test_approvals_list_filters_by_status_and_run(
    reviewer_a, support_run, billing_run, status, run_id, expected
):
    calls = {
        "mail": held(support_run, tool="email.send"),
        "shell": held(support_run, tool="shell.exec"),
        "refund": decided(billing_run, tool="refund.issue"),
    }
    listed = selectors.approvals_list(viewer=reviewer_a, status=status, run_id=run_id)
    assert [i["id"] for i in listed["items"]] == ids(calls[name] for name in expected)


def test_approvals_list_pages_by_its_cursor(reviewer_a, support_run):
    calls = [held(support_run) for _ in range(5)]
    seen, cursor = [], None
    for size in (2, 2, 1):
        page = selectors.approvals_list(viewer=reviewer_a, limit=2, cursor=cursor)
        assert len(page["items"]) == size
        seen += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
    assert cursor is None
    assert seen == ids(calls)


def test_approvals_list_reports_a_call_past_its_expiry_as_expired(reviewer_a, support_run):
    held(support_run, minutes_ago=20, expires_at=timezone.now() - timedelta(seconds=1))
    [item] = selectors.approvals_list(viewer=reviewer_a)["items"]
    assert (item["status"], item["message"]) == ("expired", "The user declined to send this email.")
    assert selectors.approvals_list(viewer=reviewer_a, status="pending")["items"] == []


def test_approvals_list_is_forbidden_without_view_runs_or_decide(tenant_a, support_run):
    held(support_run)
    with pytest.raises(Forbidden):
        selectors.approvals_list(viewer=PrincipalFactory(tenant=tenant_a))


def test_card_rows_read_who_decided_without_a_query_per_card(
    tenant_a, reviewer_a, support_run, django_assert_num_queries
):
    deciders = [PrincipalFactory(tenant=tenant_a) for _ in range(3)]
    for n, principal in enumerate(deciders):
        decided(support_run, step=n, decided_by=principal)
    held(support_run, step=9)
    qs = Approval.objects.filter(run=support_run).order_by("step")
    with django_assert_num_queries(2):  # the cards and their deciders (no rule decided any)
        rows = selectors.card_rows(qs)
        names = [a.decided_by.external_id if a.decided_by else None for a in rows]
        tenants = {a.run.tenant.pk for a in rows} | {a.tenant.pk for a in rows}
        rules = [a.decided_by_rule for a in rows]
    assert names == [p.external_id for p in deciders] + [None]
    assert tenants == {tenant_a.pk} and rules == [None] * 4
    with django_assert_num_queries(1):  # nothing decided: nothing prefetched
        [pending] = selectors.card_rows(qs.filter(step=9))
        assert pending.decided_by is None and pending.run.principal == support_run.principal


def test_card_rows_given_the_tenant_join_no_tenant_and_refuse_another_tenants_call(
    tenant_a, support_run, run_b, django_assert_num_queries
):
    mine = held(support_run)
    theirs = held(run_b)
    with django_assert_num_queries(1):
        [row] = selectors.card_rows(Approval.objects.filter(pk=mine.pk), tenant=tenant_a)
    assert row.tenant is tenant_a and row.run.tenant is tenant_a
    assert row.run.principal.external_id == "alice@example.com"  # still joined: no query
    with pytest.raises(ValueError):
        selectors.card_rows(Approval.objects.filter(pk=theirs.pk), tenant=tenant_a)
