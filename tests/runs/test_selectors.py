"""runs/selectors.py: the run resource, one run for a viewer, and the API's run list (newest
first, filters, keyset cursor, another tenant's runs never seen)."""

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from approvals.models import ApprovalStatus
from console.core.errors import Forbidden, Invalid, NotFound
from runs import selectors
from tests.support.factories import (
    AgentFactory,
    ApprovalFactory,
    ConversationFactory,
    PrincipalFactory,
    RunFactory,
)

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def listed(page):
    return [item["id"] for item in page["items"]]


@pytest.fixture
def run_a(tenant_a):
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@example.com")
    return RunFactory(
        tenant=tenant_a,
        external_id="run_1",
        agent=AgentFactory(tenant=tenant_a, external_id="support-bot"),
        agent_version=3,
        current_agent_id="billing-bot",
        principal=alice,
        role_ids=["editor"],
        conversation=ConversationFactory(tenant=tenant_a, external_id="conv_42"),
        parent_run_id="run_parent",
        status="awaiting_approval",
        input={"ask": "refund order 7"},
        limits={"maxSteps": 20},
        input_tokens=10,
        output_tokens=5,
        cost_minor_units=3,
        usage_by_model={"model-a": {"input_tokens": 10, "output_tokens": 5, "cost_minor_units": 3}},
        steps=1,
        last_seq=4,
        todos=[{"id": "t", "content": "refund", "status": "pending"}],
        verdicts={"1:0": {"verdict": "flagged", "guard": "pii", "reason": "an email"}},
        taint_summary={"untrusted": True},
        started_at=T0,
    )


def test_run_get_is_the_run_resource(reviewer_a, run_a):
    resource = selectors.run_get(viewer=reviewer_a, run_id="run_1")
    assert resource == {
        "id": "run_1",
        "agent_id": "support-bot",
        "agent_version": 3,
        "current_agent_id": "billing-bot",
        "principal_id": "alice@example.com",
        "role_ids": ["editor"],
        "conversation_id": "conv_42",
        "parent_run_id": "run_parent",
        "status": "awaiting_approval",
        "input": {"ask": "refund order 7"},
        "limits": {"maxSteps": 20},
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_minor_units": 3},
        "usage_by_model": {
            "model-a": {"input_tokens": 10, "output_tokens": 5, "cost_minor_units": 3}
        },
        "steps": 1,
        "last_seq": 4,
        "todos": [{"id": "t", "content": "refund", "status": "pending"}],
        "verdicts": {"1:0": {"verdict": "flagged", "guard": "pii", "reason": "an email"}},
        "taint_summary": {"untrusted": True},
        "pending_calls": [],
        "result": None,
        "ended_by_tool": None,
        "finish_reason": None,
        "usage_denied": None,
        "error": None,
        "started_at": T0,
        "finished_at": None,
    }


def test_a_run_without_principal_or_conversation_says_so(reviewer_a, tenant_a):
    RunFactory(tenant=tenant_a, external_id="run_bare", principal=None, conversation=None)
    resource = selectors.run_get(viewer=reviewer_a, run_id="run_bare")
    assert (resource["principal_id"], resource["conversation_id"]) == (None, None)


def test_the_runs_pending_calls_are_its_pending_ones_in_request_order(reviewer_a, run_a):
    second = ApprovalFactory(run=run_a, position=1, tool_call_id="call_b")
    first = ApprovalFactory(run=run_a, position=0, tool_call_id="call_a")
    ApprovalFactory(run=run_a, position=2, status=ApprovalStatus.DENIED)
    due = ApprovalFactory(run=run_a, position=3, expires_at=timezone.now() - timedelta(seconds=1))
    calls = selectors.run_get(viewer=reviewer_a, run_id="run_1")["pending_calls"]
    assert [(c["id"], c["tool_call_id"], c["run_id"]) for c in calls] == [
        (first.public_id, "call_a", "run_1"),
        (second.public_id, "call_b", "run_1"),
    ]
    due.refresh_from_db()
    assert due.status == "expired"  # past its expiry: expired, never reported pending


def test_run_get_of_another_tenants_run_is_404_like_a_missing_one(reviewer_b, run_a):
    for run_id in ("run_1", "run_missing"):
        with pytest.raises(NotFound) as caught:
            selectors.run_get(viewer=reviewer_b, run_id=run_id)
        assert (caught.value.code, caught.value.message) == ("run_not_found", f"no run '{run_id}'")


def test_run_get_is_forbidden_to_a_decide_key(decide_key, run_a):
    with pytest.raises(Forbidden):
        selectors.run_get(viewer=decide_key, run_id="run_1")


# --- the list ---


@pytest.fixture
def five_runs(tenant_a):
    """run_0 .. run_4, a minute apart (run_4 newest); odd ones are bob's, in conversation c2,
    by billing-bot and done."""
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice")
    bob = PrincipalFactory(tenant=tenant_a, external_id="bob")
    support = AgentFactory(tenant=tenant_a, external_id="support-bot")
    billing = AgentFactory(tenant=tenant_a, external_id="billing-bot")
    c1 = ConversationFactory(tenant=tenant_a, external_id="c1")
    c2 = ConversationFactory(tenant=tenant_a, external_id="c2")
    return [
        RunFactory(
            tenant=tenant_a,
            external_id=f"run_{i}",
            started_at=T0 + timedelta(minutes=i),
            principal=bob if i % 2 else alice,
            agent=billing if i % 2 else support,
            conversation=c2 if i % 2 else c1,
            status="done" if i % 2 else "running",
        )
        for i in range(5)
    ]


def test_runs_list_is_newest_first_and_never_another_tenants(reviewer_a, tenant_b, five_runs):
    RunFactory(tenant=tenant_b, external_id="run_9", started_at=T0 + timedelta(hours=1))
    page = selectors.runs_list(viewer=reviewer_a)
    assert listed(page) == ["run_4", "run_3", "run_2", "run_1", "run_0"]
    assert page["next_cursor"] is None


def test_runs_started_at_the_same_moment_are_newest_id_first(reviewer_a, tenant_a):
    made = [RunFactory(tenant=tenant_a, external_id=f"run_{i}", started_at=T0) for i in range(3)]
    assert listed(selectors.runs_list(viewer=reviewer_a)) == [r.external_id for r in made[::-1]]


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"principal_id": "bob"}, ["run_3", "run_1"]),
        ({"conversation_id": "c1"}, ["run_4", "run_2", "run_0"]),
        ({"agent_id": "billing-bot"}, ["run_3", "run_1"]),
        ({"status": "running"}, ["run_4", "run_2", "run_0"]),
        ({"principal_id": "alice", "status": "done"}, []),
        ({"agent_id": "nobody-bot"}, []),
    ],
)
def test_runs_list_filters(reviewer_a, five_runs, filters, expected):
    assert listed(selectors.runs_list(viewer=reviewer_a, **filters)) == expected


@pytest.mark.parametrize("started", [None, T0], ids=["a minute apart", "all at once"])
def test_runs_list_pages_by_an_opaque_cursor_without_skipping_or_repeating(
    reviewer_a, tenant_a, five_runs, started
):
    if started:
        for run in five_runs:
            run.started_at = started
            run.save(update_fields=["started_at"])
    seen, cursor = [], None
    for size in (2, 2, 1):
        page = selectors.runs_list(viewer=reviewer_a, limit=2, cursor=cursor)
        assert len(page["items"]) == size
        seen += listed(page)
        cursor = page["next_cursor"]
    assert cursor is None
    assert seen == listed(selectors.runs_list(viewer=reviewer_a))
    assert sorted(seen) == [f"run_{i}" for i in range(5)]


def test_runs_list_carries_each_runs_pending_calls(reviewer_a, five_runs):
    call = ApprovalFactory(run=five_runs[2])
    ApprovalFactory(run=five_runs[2], status=ApprovalStatus.APPROVED)
    items = {i["id"]: i for i in selectors.runs_list(viewer=reviewer_a)["items"]}
    assert [c["id"] for c in items["run_2"]["pending_calls"]] == [call.public_id]
    assert all(items[r]["pending_calls"] == [] for r in items if r != "run_2")


def test_runs_list_is_forbidden_to_a_decide_key(decide_key, five_runs):
    with pytest.raises(Forbidden):
        selectors.runs_list(viewer=decide_key)


def test_a_cursor_names_a_position_in_the_list(tenant_a):
    run = RunFactory(tenant=tenant_a, started_at=T0 + timedelta(microseconds=7))
    assert selectors.cursor_decode(selectors.cursor_encode(run)) == (run.started_at, run.pk)


def _encoded(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor!",
        _encoded(["2026-12-02T10:00:00", 1]),  # a time without an offset
        _encoded(["2026-12-02T10:00:00+00:00", "1"]),  # an id that is not a number
        _encoded(["yesterday", 1]),
        _encoded({"at": "2026-12-02T10:00:00+00:00"}),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_a_cursor_this_server_did_not_issue_is_invalid(reviewer_a, cursor):
    with pytest.raises(Invalid) as caught:
        selectors.runs_list(viewer=reviewer_a, cursor=cursor)
    assert caught.value.code == "validation_error"
    assert caught.value.details == [{"path": "query.cursor", "message": "invalid cursor"}]
