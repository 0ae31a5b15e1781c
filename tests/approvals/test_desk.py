"""The desk's one selector (`decidable_pending`: the list, the nav count and bulk agree with
`access.decidable`), its keyset pages and views, and the bulk decision endpoint (each decision
exactly once, refusals per call, tenant isolation, CSRF)."""

import json
import threading

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from approvals import access, selectors_desk
from approvals.models import Approval, ApprovalStatus
from budgets.models import Budget, BudgetOverride
from console.models import Role
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory, make_key

pytestmark = pytest.mark.django_db

BULK = "/api/v1/approvals/decisions"


def _override(tenant, run, *, leads=()):
    budget = Budget.objects.create(
        tenant=tenant,
        name=f"b-{run.external_id}",
        scope_type="tenant",
        period="day",
        ceiling_minor_units=100,
    )
    budget.leads.set(leads)
    approval = ApprovalFactory(run=run, tool_name="budget.override", tool_call_id=f"o-{run.pk}")
    BudgetOverride.objects.create(
        approval=approval, budget=budget, run=run, estimated_cost_minor_units=5
    )
    return approval


@pytest.fixture
def mix(tenant_a, reviewer_a, lead_a, admin_a):
    """Pending calls of every kind a desk must sort out: tools, own runs, overrides (led by the
    lead, by no one), a mirror, an expired one, a decided one."""
    mail_reviewer = Role.objects.create(
        tenant=tenant_a,
        name="mail-only",
        capabilities=["view_runs", "decide"],
        decide_tools=["send_*"],
    )
    erin = PrincipalFactory(tenant=tenant_a, external_id="erin@a.example", password="erin-pass-123")
    erin.roles.set([mail_reviewer])
    now = timezone.now()
    calls = []
    for i, tool in enumerate(["send_email", "drop_table", "send_sms", "refund"]):
        run = RunFactory(tenant=tenant_a, external_id=f"run_mix_{i}")
        calls.append(
            ApprovalFactory(
                run=run, tool_name=tool, requested_at=now - timezone.timedelta(minutes=10 - i)
            )
        )
    own = RunFactory(tenant=tenant_a, external_id="run_reviewer_own", principal=reviewer_a)
    calls.append(ApprovalFactory(run=own, tool_name="send_email"))
    lead_own = RunFactory(tenant=tenant_a, external_id="run_lead_own", principal=lead_a)
    calls.append(ApprovalFactory(run=lead_own, tool_name="refund"))
    calls.append(
        _override(tenant_a, RunFactory(tenant=tenant_a, external_id="run_o1"), leads=[lead_a])
    )
    calls.append(_override(tenant_a, RunFactory(tenant=tenant_a, external_id="run_o2")))
    calls.append(_override(tenant_a, lead_own, leads=[lead_a]))  # lead's own run: never the lead
    calls.append(ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="budget.override"))
    parent = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="send_email")
    ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="send_email", mirror_of=parent)
    calls.append(parent)
    ApprovalFactory(
        run=RunFactory(tenant=tenant_a),
        tool_name="send_email",
        expires_at=now - timezone.timedelta(seconds=1),
    )
    ApprovalFactory(
        run=RunFactory(tenant=tenant_a), tool_name="send_email", status=ApprovalStatus.APPROVED
    )
    return {"erin": erin, "calls": calls}


def _by_python(viewer, tenant):
    """What `access.decidable` picks among every open pending call (the reference)."""
    pending = Approval.objects.filter(
        tenant=tenant, status="pending", mirror_of__isnull=True, expires_at__gt=timezone.now()
    ).select_related("run", "run__tenant", "budget_override__budget")
    return {a.public_id for a in access.decidable(viewer, list(pending))}


def test_decidable_pending_is_exactly_what_each_persona_may_decide(
    mix, tenant_a, reviewer_a, lead_a, admin_a, viewer_a
):
    for viewer in (reviewer_a, lead_a, admin_a, viewer_a, mix["erin"]):
        found = set(
            selectors_desk.decidable_pending(viewer=viewer).values_list("public_id", flat=True)
        )
        assert found == _by_python(viewer, tenant_a), viewer.external_id
        assert selectors_desk.desk_count(viewer=viewer) == len(found)
        assert selectors_desk.nav_pending_count_context(viewer=viewer)["nav_pending_count"] == len(
            found
        )
    # The shapes of the answer, spelt out: the reviewer never its own run nor an override,
    # the lead its budget's override but not its own run's, erin only send_* tools.
    reviewer = set(
        selectors_desk.decidable_pending(viewer=reviewer_a).values_list("tool_name", flat=True)
    )
    assert "budget.override" not in reviewer
    lead = selectors_desk.decidable_pending(viewer=lead_a)
    assert lead.filter(run__external_id="run_o1").exists()
    assert not lead.filter(run__external_id="run_lead_own").exists()
    erin = set(
        selectors_desk.decidable_pending(viewer=mix["erin"]).values_list("tool_name", flat=True)
    )
    assert erin == {"send_email", "send_sms"}
    assert selectors_desk.desk_count(viewer=viewer_a) == 0


def test_a_viewer_whose_roles_decide_every_tool_is_counted_without_reading_its_tools(
    mix, tenant_a, reviewer_a, lead_a, admin_a
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from console.directory.access import decides_every_tool

    assert decides_every_tool(reviewer_a) and decides_every_tool(admin_a)  # "*", admin
    assert not decides_every_tool(mix["erin"])  # send_* only
    for viewer in (reviewer_a, lead_a, admin_a):
        every = decides_every_tool(viewer)
        with CaptureQueriesContext(connection) as seen:
            count = selectors_desk.desk_count(viewer=viewer)
        distinct = [q for q in seen.captured_queries if "DISTINCT" in q["sql"]]
        assert bool(distinct) != every, viewer.external_id
        assert count == len(_by_python(viewer, tenant_a))
        # The override branch asks the budget's leads per override call, never by a join.
        assert all("JOIN" not in q["sql"] for q in seen.captured_queries if "COUNT" in q["sql"])
    with CaptureQueriesContext(connection) as seen:
        erin = selectors_desk.desk_count(viewer=mix["erin"])
    assert erin == len(_by_python(mix["erin"], tenant_a))
    assert any("DISTINCT" in q["sql"] for q in seen.captured_queries)
    with pytest.raises(ValueError):  # an unknown set of tools is not "every tool" for erin
        access.decidable_q(mix["erin"], None)


def test_decides_every_tool_needs_a_deciding_role_with_a_star_glob(tenant_a, reviewer_a):
    from console.directory.access import decides_every_tool
    from console.directory.services import api_key_create

    globs = Role.objects.create(
        tenant=tenant_a, name="globs", capabilities=["view_runs", "decide"], decide_tools=["**"]
    )
    looker = Role.objects.create(
        tenant=tenant_a, name="looker", capabilities=["view_runs"], decide_tools=["*"]
    )
    p = PrincipalFactory(tenant=tenant_a, external_id="globs@a.example")
    p.roles.set([looker])  # "*" on a role that may not decide decides nothing
    assert not decides_every_tool(p)
    p = PrincipalFactory(tenant=tenant_a, external_id="stars@a.example")
    p.roles.set([globs])
    assert decides_every_tool(p)
    p.is_active = False
    assert not decides_every_tool(p)
    decide_key, _ = api_key_create(
        tenant=tenant_a, name="d", scopes=["decide"], principal=reviewer_a
    )
    assert decides_every_tool(decide_key)
    ingest_key, _ = api_key_create(
        tenant=tenant_a, name="i", scopes=["ingest"], principal=reviewer_a
    )
    assert not decides_every_tool(ingest_key)


def test_the_desk_lists_what_the_viewer_may_decide_and_says_so(client, mix, lead_a):
    client.force_login(lead_a.user)
    html = client.get("/approvals/").content.decode()
    count = selectors_desk.desk_count(viewer=lead_a)
    assert f"{count} to decide" in html
    assert html.count('class="desk-row"') == count
    nav = '<span id="nav-pending-count" class="tag is-rounded is-warning" title="pending calls">'
    assert f"{nav}{count}<" in html


def test_a_call_of_a_run_for_no_one_is_listed(client, tenant_a, reviewer_a):
    call = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=None))
    client.force_login(reviewer_a.user)
    html = client.get("/approvals/").content.decode()
    assert f'id="desk-row-{call.public_id}"' in html and "for no one" in html


def test_a_viewer_sees_pending_calls_read_only(client, mix, viewer_a):
    client.force_login(viewer_a.user)
    html = client.get("/approvals/").content.decode()
    assert "read-only" in html and 'class="desk-check"' not in html
    assert 'data-decides="0"' in html


def test_views_filter_the_list(client, tenant_a, reviewer_a):
    now = timezone.now()
    old = ApprovalFactory(
        run=RunFactory(tenant=tenant_a), requested_at=now - timezone.timedelta(minutes=14)
    )
    fresh = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    pricey = ApprovalFactory(
        run=RunFactory(tenant=tenant_a, cost_minor_units=600, limits={"costCeilingMinorUnits": 500})
    )
    filters = {"view": "overdue"}  # no reminder set: half the 15-minute time to live
    ids = set(
        selectors_desk.decidable_pending(viewer=reviewer_a, filters=filters).values_list(
            "public_id", flat=True
        )
    )
    assert ids == {old.public_id}
    filters = {"view": "over_budget"}
    ids = set(
        selectors_desk.decidable_pending(viewer=reviewer_a, filters=filters).values_list(
            "public_id", flat=True
        )
    )
    assert ids == {pricey.public_id}
    # "My tools": the tools this reviewer decided lately.
    assert not selectors_desk.decidable_pending(
        viewer=reviewer_a, filters={"view": "mine"}
    ).exists()
    ApprovalFactory(
        run=RunFactory(tenant=tenant_a),
        tool_name=fresh.tool_name,
        status="approved",
        decided_by=reviewer_a,
        decided_at=now,
    )
    assert (
        selectors_desk.decidable_pending(viewer=reviewer_a, filters={"view": "mine"}).count() == 3
    )
    client.force_login(reviewer_a.user)
    html = client.get("/approvals/", {"view": "over_budget"}).content.decode()
    assert pricey.public_id in html and fresh.public_id not in html and "1 to decide" in html


# ---- bulk ----------------------------------------------------------------------------------


def _post(client, body, **headers):
    return client.post(BULK, json.dumps(body), content_type="application/json", headers=headers)


def test_bulk_decides_each_call_once_and_reports_refusals_per_call(
    client, tenant_a, tenant_b, reviewer_a, mix
):
    key = make_key(tenant_a, scopes=("decide",), principal=reviewer_a)
    auth = {"Authorization": f"Bearer {key}"}
    calls = mix["calls"]
    mine = calls[0]  # send_email, decidable
    own = calls[4]  # the reviewer's own run
    override = calls[6]  # a lead's override
    done = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="send_email")
    ApprovalFactory._meta.model.objects.filter(pk=done.pk).update(status="denied")
    foreign = ApprovalFactory(run=RunFactory(tenant=tenant_b))
    ids = [
        mine.public_id,
        own.public_id,
        override.public_id,
        done.public_id,
        foreign.public_id,
        "apr_nope",
        mine.public_id,
    ]
    response = _post(client, {"decision": "deny", "approvalIds": ids, "message": "not now"}, **auth)
    assert response.status_code == 200, response.content
    body = response.json()
    results = {r["approvalId"]: r for r in body["results"]}
    assert [r["approvalId"] for r in body["results"]] == ids[:-1]  # a repeated id once
    assert results[mine.public_id]["status"] == 200
    assert results[mine.public_id]["approval"]["status"] == "denied"
    assert results[mine.public_id]["approval"]["message"] == "not now"
    assert results[own.public_id]["status"] == 403
    assert results[own.public_id]["error"]["code"] == "may_not_decide"
    assert results[override.public_id]["status"] == 403
    assert results[done.public_id]["status"] == 409
    assert results[done.public_id]["error"]["details"]["status"] == "denied"
    for other in (foreign.public_id, "apr_nope"):  # another tenant's: exactly like none
        assert results[other]["status"] == 404
        assert results[other]["error"]["code"] == "approval_not_found"
    assert (body["decided"], body["refused"]) == (1, 5)
    foreign.refresh_from_db(), own.refresh_from_db()
    assert foreign.status == own.status == "pending"
    # Again: the decided one is a 409 now, nothing decided twice.
    again = _post(client, {"decision": "approve", "approvalIds": [mine.public_id]}, **auth).json()
    assert again["results"][0]["status"] == 409 and again["decided"] == 0
    mine.refresh_from_db()
    assert mine.status == "denied"


def test_bulk_refuses_a_bad_body_whole_and_changes_nothing(client, tenant_a, reviewer_a):
    key = make_key(tenant_a, scopes=("decide",), principal=reviewer_a)
    auth = {"Authorization": f"Bearer {key}"}
    call = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    for body in (
        {"decision": "maybe", "approvalIds": [call.public_id]},
        {"decision": "approve", "approvalIds": []},
        {"decision": "approve", "approvalIds": [call.public_id] * 201},
        {"decision": "approve", "approvalIds": [call.public_id], "extra": 1},
    ):
        response = _post(client, body, **auth)
        assert response.status_code == 422, body
    call.refresh_from_db()
    assert call.status == "pending"
    ingest = make_key(tenant_a, scopes=("ingest",))
    response = _post(
        client,
        {"decision": "approve", "approvalIds": [call.public_id]},
        Authorization=f"Bearer {ingest}",
    )
    assert response.status_code == 403
    assert (
        _post(client, {"decision": "approve", "approvalIds": [call.public_id]}).status_code == 401
    )


def test_bulk_from_a_browser_needs_the_csrf_token(tenant_a, reviewer_a):
    call = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(reviewer_a.user)
    body = {"decision": "approve", "approvalIds": [call.public_id]}
    assert _post(browser, body).status_code == 403
    call.refresh_from_db()
    assert call.status == "pending"
    browser.get("/approvals/")  # sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    response = _post(browser, body, **{"X-CSRFToken": token})
    assert response.status_code == 200 and response.json()["decided"] == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_bulk_requests_racing_decide_each_call_once(tenant_a, reviewer_a, admin_a):
    calls = [ApprovalFactory(run=RunFactory(tenant=tenant_a)) for _ in range(6)]
    ids = [c.public_id for c in calls]
    keys = [make_key(tenant_a, scopes=("decide",), principal=p) for p in (reviewer_a, admin_a)]
    answers = []

    def go(key, decision):
        try:
            body = {"decision": decision, "approvalIds": ids}
            answers.append(_post(Client(), body, Authorization=f"Bearer {key}").json())
        finally:
            connection.close()

    threads = [
        threading.Thread(target=go, args=(k, d))
        for k, d in zip(keys, ("approve", "deny"), strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(a["decided"] for a in answers) == 6
    won = [r for a in answers for r in a["results"] if r["status"] == 200]
    assert sorted(r["approvalId"] for r in won) == sorted(ids)
    assert Approval.objects.filter(public_id__in=ids, status="pending").count() == 0


# ---- live ----------------------------------------------------------------------------------


def test_live_rows_arrive_for_those_who_may_decide_them_and_leave_when_decided(
    tenant_a, reviewer_a, admin_a
):
    from approvals import live_desk
    from approvals.services.decisions import approval_decide

    call = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="send_email")
    own = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=reviewer_a))
    html = live_desk.requested_html(viewer=reviewer_a, approval_ids=[call.public_id], filters={})
    assert f'id="desk-row-{call.public_id}"' in html
    assert 'hx-swap-oob="beforeend:#desk-rows"' in html
    assert f'data-live-unless="#desk-more, #desk-row-{call.public_id}"' in html
    assert 'id="desk-count"' in html and "2 to decide" not in html and "1 to decide" in html
    mine = live_desk.requested_html(viewer=reviewer_a, approval_ids=[own.public_id], filters={})
    assert "desk-row-" not in mine  # the reviewer's own run: never listed, never counted
    filtered = live_desk.requested_html(
        viewer=reviewer_a, approval_ids=[call.public_id], filters={"tool": "other"}
    )
    assert "desk-row-" not in filtered and "0 to decide" in filtered
    approval_decide(approval=call, viewer=admin_a, decision="approve")
    gone = live_desk.changed_html(viewer=reviewer_a, approval_ids=[call.public_id], filters={})
    assert f'hx-swap-oob="delete:#desk-row-{call.public_id}"' in gone
    assert f'id="approval-{call.public_id}"' in gone and "Approved" in gone  # the pane's card
    assert "0 to decide" in gone


def test_an_inbox_push_counts_once_when_the_nav_and_the_heading_count_the_same_calls(
    mix, tenant_a, reviewer_a, viewer_a
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from approvals import live_desk

    call = mix["calls"][0]
    count = selectors_desk.desk_count(viewer=reviewer_a)

    def push(viewer, filters):
        with CaptureQueriesContext(connection) as seen:
            html = live_desk.desk_html(
                viewer=viewer, approval_ids=[call.public_id], change="requested", filters=filters
            )
        return html, sum("COUNT(" in q["sql"] for q in seen.captured_queries)

    html, counts = push(reviewer_a, {})
    assert counts == 1
    assert f'title="pending calls">{count}<' in html
    assert f"{count} to decide" in html and f'id="desk-row-{call.public_id}"' in html
    html, counts = push(reviewer_a, {"tool": call.tool_name})  # the heading counts fewer
    assert counts == 2 and f'title="pending calls">{count}<' in html
    filtered = selectors_desk.desk_list_count(viewer=reviewer_a, filters={"tool": call.tool_name})
    assert f"{filtered['count']} to decide" in html and filtered["count"] < count
    # A viewer who decides nothing: the heading counts every pending call (read-only), the
    # navigation counts none.
    html, counts = push(viewer_a, {})
    assert counts == 2
    assert 'title="pending calls">0<' in html and "to decide" not in html
    assert selectors_desk.desk_count(viewer=viewer_a) == 0


# ---- the first page's cost ------------------------------------------------------------------


def test_the_first_page_costs_the_same_queries_for_60_calls_as_for_3_and_agrees_with_itself(
    client, tenant_a, reviewer_a
):
    """One DISTINCT of the open calls' tools (for the list and the choices), one GROUP BY for
    the count and the decidable tools, the page, its runs' budgets and verdicts; the first
    card from what the page read. The count, the rows and the tool choices agree."""
    from django.test.utils import CaptureQueriesContext

    def make(n, offset):
        for i in range(n):
            ApprovalFactory(
                run=RunFactory(tenant=tenant_a, external_id=f"run_q_{offset + i}"),
                tool_name=("send_email", "run_sql", "refund")[i % 3],
            )

    client.force_login(reviewer_a.user)
    make(3, 0)
    client.get("/approvals/")
    with CaptureQueriesContext(connection) as few:
        html = client.get("/approvals/").content.decode()
    assert "3 to decide" in html
    make(57, 3)
    with CaptureQueriesContext(connection) as many:
        html = client.get("/approvals/").content.decode()
    assert len(many.captured_queries) == len(few.captured_queries)
    assert "60 to decide" in html and html.count('class="desk-row"') == selectors_desk.PAGE
    assert 'id="desk-more"' in html  # the other 10 a keyset page away
    for tool in ("send_email", "run_sql", "refund"):
        assert f'<option value="{tool}">{tool}</option>' in html
    counted = [q["sql"] for q in many.captured_queries if "COUNT(" in q["sql"]]
    assert len(counted) == 2  # the desk's GROUP BY and the bell's unread count
