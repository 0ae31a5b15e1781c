"""Rules at `approval.requested`: a matching call is created decided in the batch's transaction
(decidedByRule, no decidedBy), audited with the rule as actor, counted in hits, absent from the
inbox, and answered at once by the long-poll; deny beats approve; four-eyes; expiry; narrowing;
a rule change reaches the next batch (the version read with it) and never a decided call; no
query per rule or per call; hits exact under concurrent batches (PostgreSQL)."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import selectors_desk
from approvals.models import Approval, ApprovalStatus, Rule, WebhookDelivery
from approvals.services.rules import rule_create, rule_deactivate, rule_update
from approvals.services.webhooks import webhook_create
from console.models import AuditEvent
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs"
TO_ACME = [{"path": "to", "op": "endsWith", "value": "@acme.com"}]


def rule(tenant, by, **fields):
    fields = {"name": "r", "effect": "approve", "tool_pattern": "email.*", **fields}
    return rule_create(tenant=tenant, fields=fields, principal=by)


def admit(api, run_id="run_r", principal="alice@a.example", agent="support-bot", **extra):
    body = {"id": run_id, "agentId": agent, "agentVersion": 1, "principalId": principal, **extra}
    assert api.post(RUNS, body).status_code in (200, 201)


def hold(api, run_id="run_r", calls=None, seq=1):
    calls = calls or [
        {"toolCallId": "call_1", "toolName": "email.send", "arguments": {"to": "bob@acme.com"},
         "rejectionMessage": "Not sent."}
    ]  # fmt: skip
    event = {"seq": seq, "type": "approval.requested", "step": 1, "calls": calls}
    response = api.post(f"{RUNS}/{run_id}/events", {"events": [event]})
    assert response.status_code == 200, response.content


def call(n, to="bob@acme.com", tool="email.send"):
    return {"toolCallId": f"call_{n}", "toolName": tool, "arguments": {"to": to},
            "rejectionMessage": f"Not sent {n}."}  # fmt: skip


def test_a_matching_call_is_created_approved_by_the_rule(ingest_a, tenant_a, lead_a):
    made = rule(tenant_a, lead_a, conditions=TO_ACME)
    admit(ingest_a)
    hold(ingest_a)
    approval = Approval.objects.get()
    assert approval.status == ApprovalStatus.APPROVED
    assert approval.decided_by_id is None and approval.decided_by_rule_id == made.pk
    assert approval.decided_arguments == {"to": "bob@acme.com"} and approval.decision_seq == 1
    resource = ingest_a.get(f"{RUNS}/run_r").json()
    assert resource["pendingCalls"] == []
    decisions = ingest_a.get(f"{RUNS}/run_r/decisions", wait="5").json()
    assert decisions["complete"] is True
    assert decisions["decisions"] == [
        {
            **decisions["decisions"][0],
            "decision": "approved",
            "decidedBy": None,
            "decidedByRule": made.public_id,
            "arguments": {"to": "bob@acme.com"},
        }
    ]
    state = ingest_a.get(f"{RUNS}/run_r/state").json()
    assert state["decisions"][0]["decidedByRule"] == made.public_id
    audit = AuditEvent.objects.get(action="approval.decided")
    assert audit.actor_principal_id is None and audit.actor_key_id is None
    assert audit.actor_rule == made.public_id and audit.data["status"] == "approved"
    made.refresh_from_db()
    assert made.hits == 1 and made.last_hit_at is not None


def test_the_long_poll_answers_a_rule_decision_at_once(ingest_a, tenant_a, lead_a):
    import time

    rule(tenant_a, lead_a)
    admit(ingest_a)
    hold(ingest_a)
    started = time.monotonic()
    body = ingest_a.get(f"{RUNS}/run_r/decisions", wait="10").json()
    assert time.monotonic() - started < 2
    assert [d["decision"] for d in body["decisions"]] == ["approved"]


def test_a_deny_rule_gives_its_message_else_the_calls_rejection_message(ingest_a, tenant_a, lead_a):
    rule(tenant_a, lead_a, effect="deny", tool_pattern="email.send", message="No mail today.")
    rule(tenant_a, lead_a, effect="deny", tool_pattern="files.*")
    admit(ingest_a)
    hold(ingest_a, calls=[call(1), call(2, tool="files.rm")])
    decided = {a.tool_call_id: a for a in Approval.objects.all()}
    assert decided["call_1"].status == "denied" and decided["call_1"].message == "No mail today."
    assert decided["call_2"].status == "denied" and decided["call_2"].message == "Not sent 2."
    body = ingest_a.get(f"{RUNS}/run_r/decisions").json()
    assert {d["toolCallId"]: d["message"] for d in body["decisions"]} == {
        "call_1": "No mail today.",
        "call_2": "Not sent 2.",
    }
    assert all(d["arguments"] is None for d in body["decisions"])


def test_deny_beats_approve_at_ingest(ingest_a, tenant_a, lead_a):
    rule(tenant_a, lead_a, conditions=TO_ACME)
    deny = rule(tenant_a, lead_a, effect="deny", tool_pattern="*", conditions=[
        {"path": "to", "op": "startsWith", "value": "ceo@"}])  # fmt: skip
    admit(ingest_a)
    hold(ingest_a, calls=[call(1, to="ceo@acme.com"), call(2, to="bob@acme.com")])
    got = {a.tool_call_id: (a.status, a.decided_by_rule_id) for a in Approval.objects.all()}
    assert got["call_1"] == ("denied", deny.pk)
    assert got["call_2"][0] == "approved"


def test_decided_calls_never_reach_the_inbox_and_the_rest_wait(
    ingest_a, tenant_a, lead_a, reviewer_a
):
    rule(tenant_a, lead_a, conditions=TO_ACME)
    admit(ingest_a)
    hold(ingest_a, calls=[call(1), call(2, to="eve@evil.com")])
    shown = selectors_desk.desk_page(viewer=reviewer_a)["rows"]
    assert [r["approval"].tool_call_id for r in shown] == ["call_2"]
    assert selectors_desk.nav_pending_count_context(viewer=reviewer_a)["nav_pending_count"] == 1
    body = ingest_a.get(f"{RUNS}/run_r/decisions").json()
    assert body["pending"] == ["call_2"] and body["complete"] is False
    assert [d["toolCallId"] for d in body["decisions"]] == ["call_1"]


def test_webhooks_hear_requested_only_of_calls_left_to_people(ingest_a, tenant_a, lead_a):
    webhook_create(tenant=tenant_a, url="https://hooks.example/x")
    rule(tenant_a, lead_a, conditions=TO_ACME)
    admit(ingest_a)
    hold(ingest_a, calls=[call(1), call(2, to="eve@evil.com")])
    sent = sorted(
        (d.event, d.payload["approval"]["toolCallId"]) for d in WebhookDelivery.objects.all()
    )
    assert sent == [("approval.decided", "call_1"), ("approval.requested", "call_2")]
    decided = next(d for d in WebhookDelivery.objects.all() if d.event == "approval.decided")
    assert decided.payload["approval"]["decidedByRule"].startswith("rul_")


def test_a_rule_never_decides_its_creators_own_run_unless_self_approval_is_on(
    ingest_a, tenant_a, lead_a
):
    rule(tenant_a, lead_a)
    admit(ingest_a, run_id="run_self", principal=lead_a.external_id)
    hold(ingest_a, run_id="run_self")
    assert Approval.objects.get().status == ApprovalStatus.PENDING
    tenant_a.allow_self_approval = True
    tenant_a.save()
    admit(ingest_a, run_id="run_self2", principal=lead_a.external_id)
    hold(ingest_a, run_id="run_self2")
    assert Approval.objects.get(run__external_id="run_self2").status == ApprovalStatus.APPROVED


def test_an_expired_rule_does_nothing(ingest_a, tenant_a, lead_a):
    made = rule(tenant_a, lead_a, expires_at=timezone.now() + timedelta(hours=1))
    Rule.objects.filter(pk=made.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    rule_update(rule=made, fields={"name": "bump the version"}, principal=lead_a)
    admit(ingest_a)
    hold(ingest_a)
    assert Approval.objects.get().status == ApprovalStatus.PENDING


def test_a_rule_that_expires_while_compiled_stops_deciding(ingest_a, tenant_a, lead_a, monkeypatch):
    from approvals.services import rules as rule_services

    expires_at = timezone.now() + timedelta(minutes=5)
    rule(tenant_a, lead_a, expires_at=expires_at)
    admit(ingest_a)
    hold(ingest_a, calls=[call(1)])  # compiled and cached now
    # No write: the cached rule expires by itself when the clock passes its expiry (the clock
    # is moved rather than waited for, so a slow machine cannot expire it before the first call).
    later = expires_at + timedelta(seconds=1)
    monkeypatch.setattr(rule_services.timezone, "now", lambda: later)
    hold(ingest_a, calls=[call(2)], seq=2)
    got = dict(Approval.objects.values_list("tool_call_id", "status"))
    assert got == {"call_1": "approved", "call_2": "pending"}


def test_narrowing_to_a_run_and_to_a_conversation(ingest_a, tenant_a, lead_a):
    rule(tenant_a, lead_a, run_id="run_yes")
    rule(tenant_a, lead_a, conversation_id="conv_yes", tool_pattern="files.*")
    admit(ingest_a, run_id="run_yes")
    admit(ingest_a, run_id="run_no", conversationId="conv_yes")
    admit(ingest_a, run_id="run_other", conversationId="conv_no")
    for run_id in ("run_yes", "run_no", "run_other"):
        hold(ingest_a, run_id=run_id, calls=[call(1), call(2, tool="files.read")])
    got = {
        (a.run.external_id, a.tool_call_id): a.status
        for a in Approval.objects.select_related("run")
    }
    assert got == {
        ("run_yes", "call_1"): "approved",
        ("run_yes", "call_2"): "pending",
        ("run_no", "call_1"): "pending",
        ("run_no", "call_2"): "approved",
        ("run_other", "call_1"): "pending",
        ("run_other", "call_2"): "pending",
    }


def test_agent_and_principal_globs_at_ingest(ingest_a, tenant_a, lead_a):
    rule(tenant_a, lead_a, agent_pattern="support-*", principal_pattern="*@a.example")
    admit(ingest_a, run_id="run_1", agent="support-bot", principal="x@a.example")
    admit(ingest_a, run_id="run_2", agent="sales-bot", principal="x@a.example")
    admit(ingest_a, run_id="run_3", agent="support-bot", principal="x@b.example")
    for run_id in ("run_1", "run_2", "run_3"):
        hold(ingest_a, run_id=run_id)
    got = dict(Approval.objects.values_list("run__external_id", "status"))
    assert got == {"run_1": "approved", "run_2": "pending", "run_3": "pending"}


def test_a_rule_change_reaches_the_next_batch_and_never_a_decided_call(ingest_a, tenant_a, lead_a):
    made = rule(tenant_a, lead_a)
    admit(ingest_a)
    hold(ingest_a, calls=[call(1)])
    rule_update(rule=made, fields={"effect": "deny"}, principal=lead_a)
    hold(ingest_a, calls=[call(2)], seq=2)
    rule_deactivate(rule=made, principal=lead_a)
    hold(ingest_a, calls=[call(3)], seq=3)
    got = dict(Approval.objects.values_list("tool_call_id", "status"))
    assert got == {"call_1": "approved", "call_2": "denied", "call_3": "pending"}
    made.refresh_from_db()
    assert made.hits == 2


def test_hits_count_every_call_a_rule_decides(ingest_a, tenant_a, lead_a):
    a = rule(tenant_a, lead_a, name="a", tool_pattern="email.*")
    b = rule(tenant_a, lead_a, name="b", tool_pattern="files.*")
    admit(ingest_a)
    hold(ingest_a, calls=[call(1), call(2), call(3, tool="files.read"), call(4, tool="db.drop")])
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.hits, b.hits) == (2, 1)
    assert AuditEvent.objects.filter(action="approval.decided").count() == 3


SEEN = {}


def _batch_queries(api, run_id, calls, seq):
    with CaptureQueriesContext(connection) as ctx:
        hold(api, run_id=run_id, calls=calls, seq=seq)
    SEEN["sql"] = [q["sql"] for q in ctx.captured_queries]
    return len(ctx.captured_queries)


def test_a_batch_costs_no_query_per_rule_or_per_undecided_call(ingest_a, tenant_a, lead_a):
    admit(ingest_a, run_id="run_none")
    admit(ingest_a, run_id="run_one")
    admit(ingest_a, run_id="run_many")
    _batch_queries(ingest_a, "run_none", [call(1, tool="other")], 1)
    before = _batch_queries(ingest_a, "run_none", [call(2, tool="other")], 2)
    rule(tenant_a, lead_a, tool_pattern="nothing.matches")
    _batch_queries(ingest_a, "run_one", [call(1, tool="other")], 1)  # compiles once
    one = _batch_queries(ingest_a, "run_one", [call(2, tool="other")], 2)
    for i in range(200):
        rule(tenant_a, lead_a, name=f"r{i}", tool_pattern=f"tool.{i}", conditions=TO_ACME)
    _batch_queries(ingest_a, "run_many", [call(0, tool="other")], 1)  # compiles once
    many_calls = [
        call(n, tool=f"tool.{n % 7}", to="eve@evil.com") for n in range(1, 31)
    ]  # one INSERT on SQLite too
    many = _batch_queries(ingest_a, "run_many", many_calls, 2)
    assert sum("approvals_ruleversion" in q for q in SEEN["sql"]) == 1
    assert not [q for q in SEEN["sql"] if 'FROM "approvals_rule"' in q]  # compiled, cached
    # The rules version is read with every batch (with or without rules): one query.
    assert one == before
    assert many == one, (before, one, many)


def test_a_rule_saved_after_the_cache_was_filled_applies_to_the_next_batch(
    ingest_a, tenant_a, lead_a
):
    admit(ingest_a)
    rule(tenant_a, lead_a, tool_pattern="files.*")
    hold(ingest_a, calls=[call(1)])  # compiled: no rule for email
    rule(tenant_a, lead_a)
    hold(ingest_a, calls=[call(2)], seq=2)
    got = dict(Approval.objects.values_list("tool_call_id", "status"))
    assert got == {"call_1": "pending", "call_2": "approved"}


def test_another_tenants_rules_never_apply(ingest_a, ingest_b, tenant_b):
    lead_b = PrincipalFactory(tenant=tenant_b, external_id="lead@b.example", role="lead")
    rule(tenant_b, lead_b, tool_pattern="*")
    admit(ingest_a)
    hold(ingest_a)
    assert Approval.objects.get().status == ApprovalStatus.PENDING


def test_a_budget_override_is_never_decided_by_a_rule(ingest_a, tenant_a, lead_a):
    rule(tenant_a, lead_a, tool_pattern="*")
    admit(ingest_a)
    hold(ingest_a, calls=[call(1, tool="budget.override")])
    assert Approval.objects.get().status == ApprovalStatus.PENDING


def test_a_snapshot_and_an_outcome_are_decided_by_rules_too(ingest_a, tenant_a, lead_a):
    rule(tenant_a, lead_a)
    admit(ingest_a, run_id="run_o")
    outcome = {
        "status": "PAUSED",
        "messages": [],
        "pendingCalls": [
            {"toolCall": {"id": "call_o", "name": "email.send", "arguments": {"to": "a@b"}},
             "rejectionMessage": "no", "reason": "r"}
        ],
        "steps": 1,
        "usage": {"inputTokens": 0, "outputTokens": 0, "costMinorUnits": 0},
        "traceIds": [],
    }  # fmt: skip
    response = ingest_a.post(f"{RUNS}/run_o/outcome", outcome)
    assert response.status_code == 200, response.content
    assert Approval.objects.get(tool_call_id="call_o").status == ApprovalStatus.APPROVED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_hits_are_exact_under_concurrent_batches(tenant_a, lead_a, request):
    """Eight threads, each its own connection, each posting batches for a run of its own at
    the same moments; every batch holds calls in two events that two rules decide, in opposite
    orders on odd and even threads (no deadlock: a batch writes its hits once, at its end).
    Every call is decided, and hits count each exactly once."""
    if connection.settings_dict["OPTIONS"].get("pool"):
        pool = connection.pool
        request.addfinalizer(lambda sizes=(pool.min_size, pool.max_size): pool.resize(*sizes))
        pool.resize(min_size=pool.min_size, max_size=pool.max_size + 12)
    mail = rule(tenant_a, lead_a, name="mail")
    files = rule(tenant_a, lead_a, name="files", tool_pattern="files.*")
    key = make_key(tenant_a, scopes=("ingest",))
    threads_n, batches, per_event = 8, 5, 2
    barrier = threading.Barrier(threads_n, timeout=120)
    errors = []

    def events(i, b):
        tools = ["email.send", "files.read"] if i % 2 else ["files.read", "email.send"]
        return [
            {"seq": 2 * b + k + 1, "type": "approval.requested", "step": b + 1,
             "calls": [call(f"{b}_{k}_{n}", tool=tool) for n in range(per_event)]}
            for k, tool in enumerate(tools)
        ]  # fmt: skip

    def worker(i):
        client = Client()
        headers = {"Authorization": f"Bearer {key}"}
        try:
            run_id = f"run_c{i}"
            body = {"id": run_id, "agentId": "bot", "agentVersion": 1, "principalId": f"p{i}"}
            client.post(RUNS, body, content_type="application/json", headers=headers)
            for b in range(batches):
                barrier.wait()
                response = client.post(
                    f"{RUNS}/{run_id}/events",
                    {"events": events(i, b)},
                    content_type="application/json",
                    headers=headers,
                )
                if response.status_code != 200:
                    errors.append(response.content)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    each = threads_n * batches * per_event
    assert Approval.objects.filter(status=ApprovalStatus.APPROVED).count() == 2 * each
    mail.refresh_from_db()
    files.refresh_from_db()
    assert (mail.hits, files.hits) == (each, each)
    assert AuditEvent.objects.filter(action="approval.decided").count() == 2 * each


def _steps(first_seq: int, steps: range, tool="email.send") -> list[dict]:
    """A step per number, each holding one call: started, the call, its result, finished."""
    events, seq = [], first_seq
    for n in steps:
        held = {"toolCallId": f"call_{n}", "toolName": tool, "arguments": {"to": "b@acme.com"}}
        for event in (
            {"type": "step.started", "step": n, "agentId": "support-bot", "model": "m"},
            {"type": "approval.requested", "step": n, "calls": [held]},
            {"type": "tool.result", "step": n, "toolCallId": f"call_{n}",
             "toolName": tool, "result": "ok", "isError": False},
            {"type": "step.finished", "step": n, "model": "m",
             "usage": {"inputTokens": 1, "outputTokens": 1, "costMinorUnits": 0}},
        ):  # fmt: skip
            events.append({**event, "seq": seq})
            seq += 1
    return events


def test_a_batch_of_many_steps_requests_its_held_calls_together(ingest_a, tenant_a, lead_a):
    """The held calls of a batch's steps are requested (and born decided) in one go: a batch
    of 30 such steps costs the statements of a batch of 2 (runs/services/ingest.py
    BLIND_TO_APPROVALS), and every call is decided, numbered and audited as alone."""
    rule(tenant_a, lead_a, conditions=TO_ACME)
    counts = {}
    runs = (("run_warm", range(1, 2)), ("run_two", range(1, 3)), ("run_thirty", range(1, 31)))
    for run_id, steps in runs:  # the first compiles the rules and fills caches
        admit(ingest_a, run_id=run_id)
        events = _steps(1, steps)
        with CaptureQueriesContext(connection) as ctx:
            answer = ingest_a.post(f"{RUNS}/{run_id}/events", {"events": events})
        assert answer.status_code == 200, answer.content
        counts[run_id] = len(ctx.captured_queries)
        rows = Approval.objects.filter(run__external_id=run_id).order_by("position")
        assert [a.status for a in rows] == [ApprovalStatus.APPROVED] * len(steps)
        assert [a.step for a in rows] == list(steps)
        assert [a.position for a in rows] == list(range(1, len(steps) + 1))
        assert [a.decision_seq for a in rows] == list(range(1, len(steps) + 1))
    assert counts["run_thirty"] == counts["run_two"], counts
    assert AuditEvent.objects.filter(action="approval.decided").count() == 33
    assert Rule.objects.get().hits == 33


def test_one_call_asked_twice_in_a_batch_is_a_conflict_and_nothing_is_written(ingest_a):
    admit(ingest_a)
    events = _steps(1, range(1, 3))
    events[5]["calls"][0]["toolCallId"] = "call_1"  # step 2 asks for step 1's call again
    answer = ingest_a.post(f"{RUNS}/run_r/events", {"events": events})
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "approval_exists"
    assert not Approval.objects.exists()
    assert ingest_a.get(f"{RUNS}/run_r").json()["lastSeq"] == 0


def test_a_run_finished_in_the_batch_that_held_a_call_cancels_it(ingest_a):
    admit(ingest_a)
    events = _steps(1, range(1, 2))[:2]  # started, the held call
    events.append({"seq": 3, "type": "run.finished", "status": "done"})
    answer = ingest_a.post(f"{RUNS}/run_r/events", {"events": events})
    assert answer.status_code == 200, answer.content
    assert Approval.objects.get().status == ApprovalStatus.CANCELLED


def test_the_run_awaits_approval_after_the_batch_until_its_runtime_goes_on(
    ingest_a, tenant_a, lead_a
):
    """The contract: `approval.requested` leaves the run `awaiting_approval`, a rule deciding
    the call at once included; a later batch reporting the call's result (no new step) shows
    the runtime went on, and with no call waiting for a person the run is running."""
    rule(tenant_a, lead_a, conditions=TO_ACME)
    admit(ingest_a)
    hold(ingest_a)
    assert ingest_a.get(f"{RUNS}/run_r").json()["status"] == "awaiting_approval"
    result = {"seq": 2, "type": "tool.result", "step": 1, "toolCallId": "call_1",
              "toolName": "email.send", "result": "sent", "isError": False}  # fmt: skip
    assert ingest_a.post(f"{RUNS}/run_r/events", {"events": [result]}).status_code == 200
    assert ingest_a.get(f"{RUNS}/run_r").json()["status"] == "running"
