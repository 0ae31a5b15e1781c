"""The run pages: /runs/ (filters, grouping, keyset pages) and /runs/<runId>/ (every section)."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.models import Role
from runs.models import Handoff, Message, Step, ToolResult, Verdict
from tests.support.factories import (
    AgentFactory,
    ApprovalFactory,
    ConversationFactory,
    PrincipalFactory,
    RunFactory,
)

pytestmark = pytest.mark.django_db


def _ids(html: str) -> list[str]:
    return re.findall(r'data-run-id="([^"]+)"', html)


def _runs(tenant, n, **kwargs):
    base = timezone.now()
    return [
        RunFactory(tenant=tenant, started_at=base - timedelta(minutes=i), **kwargs)
        for i in range(n)
    ]


# --- access ---


def test_signed_out_requests_redirect_to_sign_in(client, tenant_a):
    run = RunFactory(tenant=tenant_a)
    for path in ("/runs/", f"/runs/{run.external_id}/", f"/runs/{run.external_id}/partials/steps/"):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


def test_another_tenants_run_page_is_404(client, reviewer_b, tenant_a):
    run = RunFactory(tenant=tenant_a, external_id="run_secret")
    client.force_login(reviewer_b.user)
    for path in (
        "/runs/run_secret/",
        "/runs/run_secret/partials/run-header/",
        "/runs/run_secret/partials/step/1/",
        "/runs/run_secret/row/",
    ):
        assert client.get(path).status_code == 404, path
    assert run.external_id not in client.get("/runs/").content.decode()


def test_same_run_id_in_two_tenants_shows_each_its_own(client, viewer_a, reviewer_b):
    RunFactory(tenant=viewer_a.tenant, external_id="run_1", agent__external_id="agent-of-a")
    RunFactory(tenant=reviewer_b.tenant, external_id="run_1", agent__external_id="agent-of-b")
    client.force_login(reviewer_b.user)
    html = client.get("/runs/run_1/").content.decode()
    assert "agent-of-b" in html and "agent-of-a" not in html


def test_viewer_sees_runs_but_no_decision_controls(client, viewer_a, tenant_a):
    run = RunFactory(tenant=tenant_a)
    ApprovalFactory(run=run, tool_name="send_email")
    client.force_login(viewer_a.user)
    assert run.external_id in client.get("/runs/").content.decode()
    html = client.get(f"/runs/{run.external_id}/").content.decode()
    assert "send_email" in html  # the held call is shown
    assert ">Approve<" not in html and ">Deny<" not in html
    assert "/decision" not in html


def test_reviewer_gets_the_inbox_card_with_decision_controls(client, reviewer_a, tenant_a):
    run = RunFactory(tenant=tenant_a)
    approval = ApprovalFactory(run=run, tool_name="send_email")
    client.force_login(reviewer_a.user)
    html = client.get(f"/runs/{run.external_id}/").content.decode()
    assert f'id="approval-{approval.public_id}"' in html
    assert ">Approve<" in html and ">Deny<" in html
    assert "Message the model reads" in html


def test_held_call_past_its_expiry_is_not_shown_pending(client, viewer_a, tenant_a):
    run = RunFactory(tenant=tenant_a)
    ApprovalFactory(run=run, expires_at=timezone.now() - timedelta(seconds=1))
    client.force_login(viewer_a.user)
    html = client.get(f"/runs/{run.external_id}/partials/run-approvals/").content.decode()
    assert 'data-status="expired"' in html and "pending</span>" not in html


def test_role_without_view_runs_is_403(client, tenant_a):
    Role.objects.create(tenant=tenant_a, name="accountant", capabilities=["view_budgets"])
    person = PrincipalFactory(tenant=tenant_a, role="accountant", password="pass-12345")
    run = RunFactory(tenant=tenant_a)
    client.force_login(person.user)
    assert client.get("/runs/").status_code == 403
    assert client.get(f"/runs/{run.external_id}/").status_code == 403


def test_user_without_principal_gets_a_clear_403(client, db):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    response = client.get("/runs/")
    assert response.status_code == 403
    assert "belongs to no organisation" in response.content.decode()


# --- the list ---


def test_list_newest_first_with_row_facts(client, viewer_a, tenant_a):
    old, new = _runs(tenant_a, 2)[::-1]
    new.limits = {"costCeilingMinorUnits": 500, "maxSteps": 20}
    new.cost_minor_units, new.steps = 123, 4
    new.save()
    ApprovalFactory(run=new)
    ApprovalFactory(run=new)
    client.force_login(viewer_a.user)
    html = client.get("/runs/").content.decode()
    assert _ids(html) == [new.external_id, old.external_id]
    row = html[html.index(f'id="run-row-{new.pk}"') :].split("</tr>")[0]
    assert "1.23" in row and "5.00" in row  # cost against its ceiling
    assert "4<span" in row and "/ 20" in row  # steps against maxSteps
    assert '<span class="tag is-warning">2</span>' in row  # pending calls


def test_runs_without_conversation_or_principal_are_shown_as_such(client, viewer_a, tenant_a):
    RunFactory(tenant=tenant_a, principal=None, conversation=None)
    client.force_login(viewer_a.user)
    html = client.get("/runs/?group=conversation").content.decode()
    assert "no conversation" in html and "no principal" in html
    html = client.get("/runs/?group=principal").content.decode()
    assert '<span class="none">no principal</span>' in html


def test_grouping_switches_between_principal_and_conversation(client, viewer_a, tenant_a):
    conv = ConversationFactory(tenant=tenant_a, external_id="conv-42")
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@example.com", name="")
    RunFactory(tenant=tenant_a, principal=alice, conversation=conv)
    client.force_login(viewer_a.user)
    by_principal = client.get("/runs/").content.decode()
    assert re.search(r"Principal:\s*alice@example.com", by_principal)
    by_conversation = client.get("/runs/?group=conversation").content.decode()
    assert re.search(r"Conversation:\s*conv-42", by_conversation)


@pytest.mark.parametrize(
    "query, expected",
    [
        ("principal=alice@example.com", {"r_alice"}),
        ("no_principal=on", {"r_nobody"}),
        ("conversation=conv-1", {"r_alice"}),
        ("no_conversation=on", {"r_bob", "r_nobody"}),
        ("agent=planner", {"r_bob"}),
        ("status=failed", {"r_nobody"}),
        ("q=r_b", {"r_bob"}),
        ("since=2026-01-02&until=2026-01-02", {"r_bob"}),
        ("until=2026-01-01", {"r_alice"}),
    ],
)
def test_filters(client, viewer_a, tenant_a, query, expected):
    day = datetime(2026, 1, 1, 12, tzinfo=UTC)
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@example.com")
    RunFactory(
        tenant=tenant_a,
        external_id="r_alice",
        principal=alice,
        conversation=ConversationFactory(tenant=tenant_a, external_id="conv-1"),
        started_at=day,
    )
    RunFactory(
        tenant=tenant_a,
        external_id="r_bob",
        agent=AgentFactory(tenant=tenant_a, external_id="planner"),
        started_at=day + timedelta(days=1),
    )
    RunFactory(
        tenant=tenant_a,
        external_id="r_nobody",
        principal=None,
        status="failed",
        started_at=day + timedelta(days=2),
    )
    client.force_login(viewer_a.user)
    response = client.get(f"/runs/?{query}")
    assert response.status_code == 200
    assert set(_ids(response.content.decode())) == expected


def test_bad_filter_is_400_names_the_field_and_lists_nothing(client, viewer_a, tenant_a):
    RunFactory(tenant=tenant_a)
    client.force_login(viewer_a.user)
    for query in ("status=sleeping", "since=yesterday", "before=xyz", "limit=0"):
        response = client.get(f"/runs/?{query}")
        assert response.status_code == 400, query
        html = response.content.decode()
        assert "not valid" in html and _ids(html) == []


def test_htmx_request_gets_only_the_list_partial(client, viewer_a, tenant_a):
    RunFactory(tenant=tenant_a)
    client.force_login(viewer_a.user)
    html = client.get("/runs/?status=running", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<div id="run-list"')
    assert "<html" not in html
    restore = {"HX-Request": "true", "HX-History-Restore-Request": "true"}
    assert "<html" in client.get("/runs/", headers=restore).content.decode()


def test_keyset_pages_older_and_newer(client, viewer_a, tenant_a):
    runs = _runs(tenant_a, 5)
    tie = RunFactory(tenant=tenant_a, started_at=runs[2].started_at)  # same time, higher id
    ordered = [runs[0], runs[1], tie, runs[2], runs[3], runs[4]]
    client.force_login(viewer_a.user)
    seen, url = [], "/runs/?limit=2"
    for _ in range(3):
        html = client.get(url).content.decode()
        seen += _ids(html)
        match = re.search(r'href="(/runs/\?[^"]*before=[^"]+)"', html)
        if not match:
            break
        url = match.group(1).replace("&amp;", "&")
    assert seen == [r.external_id for r in ordered]
    assert "Older" not in html
    newer = re.search(r'href="(/runs/\?[^"]*after=[^"]+)"', html).group(1).replace("&amp;", "&")
    assert _ids(client.get(newer).content.decode()) == [ordered[2].external_id, runs[2].external_id]


def _list_queries(client, path) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx.captured_queries)


def test_list_runs_a_constant_number_of_queries(
    client, viewer_a, tenant_a, django_assert_num_queries
):
    for i, run in enumerate(_runs(tenant_a, 40)):
        ApprovalFactory(run=run)
        if i % 2:
            run.conversation = ConversationFactory(tenant=tenant_a)
            run.save()
    client.force_login(viewer_a.user)
    small = _list_queries(client, "/runs/?limit=5")
    with django_assert_num_queries(small):
        client.get("/runs/?limit=40")
    with django_assert_num_queries(small):
        client.get("/runs/?limit=40&group=conversation&status=running")
    agent = RunFactory(tenant=tenant_a).agent.external_id
    with django_assert_num_queries(small + 1):  # the agent's id is looked up first
        client.get(f"/runs/?limit=40&agent={agent}")


def test_agent_filter_never_matches_another_tenants_agent(client, viewer_a, reviewer_b):
    RunFactory(
        tenant=reviewer_b.tenant, agent=AgentFactory(tenant=reviewer_b.tenant, external_id="x")
    )
    RunFactory(tenant=viewer_a.tenant, external_id="r_mine")
    client.force_login(viewer_a.user)
    assert _ids(client.get("/runs/?agent=x").content.decode()) == []
    assert _ids(client.get("/runs/?agent=nobody").content.decode()) == []


# --- the run page ---


@pytest.fixture
def full_run(tenant_a):
    now = timezone.now()
    parent = RunFactory(tenant=tenant_a, external_id="run_parent")
    run = RunFactory(
        tenant=tenant_a,
        external_id="run_full",
        parent_run_id="run_parent",
        role_ids=["editor", "<b>admin</b>"],
        conversation=ConversationFactory(tenant=tenant_a, external_id="conv-7"),
        limits={"costCeilingMinorUnits": 500, "maxSteps": 10, "wallClockTimeoutMs": 600000},
        cost_minor_units=250,
        steps=2,
        usage_by_model={
            "model-a": {"input_tokens": 10, "output_tokens": 5, "cost_minor_units": 250}
        },
        todos=[{"id": "t1", "content": "write the <email>", "status": "done"}],
        verdicts={"2:0": {"verdict": "blocked", "guard": "pii-guard", "reason": "leaks an email"}},
        taint_summary={"untrustedInput": True, "exfiltration": False},
        trace_ids=["trace-1"],
        ended_by_tool="final_answer",
        finish_reason="stop",
        usage_denied={"reason": "budget"},
        error={"code": "tool_failed", "message": "the tool <failed>"},
        status="failed",
        finished_at=now,
        started_at=now - timedelta(minutes=2),
    )
    RunFactory(tenant=tenant_a, external_id="run_child", parent_run_id="run_full")
    Step.objects.create(run=run, number=1, agent_id="support-bot", model="model-a", finished_at=now)
    Step.objects.create(run=run, number=2, agent_id="billing-bot", model="model-a")
    Message.objects.create(
        run=run, position=0, role="user", content="<script>alert(1)</script>", created_at=now
    )
    Message.objects.create(
        run=run,
        position=1,
        step=1,
        role="assistant",
        created_at=now + timedelta(seconds=1),
        content=[
            {"type": "text", "text": "x" * 5000},
            {"type": "json", "value": {"k": [1, 2]}},
            {"type": "image", "mediaType": "image/png", "data": {"$bytes": "iVBORw0KGgo="}},
            {
                "type": "image",
                "mediaType": "image/png",
                "data": {"$url": "https://img.example/a.png"},
            },
            {"type": "file", "mediaType": "text/html", "data": {"$url": "javascript:alert(1)"}},
        ],
        tool_calls=[{"id": "call_1", "name": "lookup_invoice", "arguments": {"id": 7}}],
    )
    ToolResult.objects.create(
        run=run,
        step=1,
        tool_call_id="call_1",
        tool_name="lookup_invoice",
        result="no",
        is_error=True,
    )
    Handoff.objects.create(
        run=run,
        step=1,
        from_agent_id="support-bot",
        to_agent_id="billing-bot",
        child_run_id="run_child",
        created_at=now + timedelta(seconds=2),
    )
    Verdict.objects.create(run=run, turn="2:0", verdict="flagged", guard="pii-guard")
    Verdict.objects.create(run=run, turn="2:0", verdict="blocked", guard="pii-guard")
    ApprovalFactory(run=run, tool_name="refund", step=2)
    return parent, run


def test_run_page_sections(client, viewer_a, full_run):
    _, run = full_run
    client.force_login(viewer_a.user)
    html = client.get("/runs/run_full/").content.decode()
    for element_id in (
        "run-header",
        "run-usage",
        "steps",
        "step-0",
        "step-1",
        "step-2",
        "run-todos",
        "run-verdicts",
        "run-approvals",
    ):
        assert f'id="{element_id}"' in html, element_id
    assert 'href="/runs/run_parent/"' in html and 'href="/runs/run_child/"' in html
    assert "&lt;b&gt;admin&lt;/b&gt;" in html  # roles at admission, escaped
    assert "trace-1" in html and "final_answer" in html and "Usage denied" in html
    assert "the tool &lt;failed&gt;" in html
    assert re.search(r'<progress max="500" value="250"', html)  # cost vs ceiling
    assert re.search(r'<progress max="10" value="2"', html)  # steps vs maxSteps
    assert "model-a" in html
    assert '<details class="long">' in html  # 5000 characters collapsed
    assert "&quot;k&quot;: [" in html  # JSON pretty-printed
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in html
    assert (
        'href="https://img.example/a.png"' in html
        and 'img.example/a.png"' not in html.split("<img")[-1].split(">")[0]
    )
    assert 'href="javascript:' not in html
    assert "tool-call is-error" in html and "lookup_invoice" in html
    assert "handoff" in html and "billing-bot" in html
    assert "write the &lt;email&gt;" in html and "todo-done" in html
    assert "verdict-blocked" in html and "pii-guard" in html and "leaks an email" in html
    assert "untrustedInput" in html
    assert "refund" in html


def test_handoff_is_drawn_between_the_messages_where_it_happened(client, viewer_a, full_run):
    _, run = full_run
    Message.objects.create(
        run=run,
        position=2,
        step=1,
        role="assistant",
        content="after the handoff",
        created_at=timezone.now() + timedelta(seconds=3),
    )
    client.force_login(viewer_a.user)
    html = client.get("/runs/run_full/").content.decode()
    assert (
        html.index("lookup_invoice")
        < html.index('class="handoff"')
        < html.index("after the handoff")
    )


def test_user_content_is_escaped(client, viewer_a, full_run, tenant_a):
    client.force_login(viewer_a.user)
    html = client.get("/runs/run_full/").content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    nasty = PrincipalFactory(tenant=tenant_a, external_id="<img src=x onerror=alert(1)>")
    RunFactory(tenant=tenant_a, principal=nasty, current_agent_id="<b>bold</b>")
    html = client.get("/runs/").content.decode()
    assert "<img src=x" not in html and "<b>bold</b>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def _untimed(html: str) -> str:
    return re.sub(r"\d+", "0", html)


def test_fragments_are_the_pages_own_html(client, viewer_a, full_run):
    client.force_login(viewer_a.user)
    page = client.get("/runs/run_full/").content.decode()
    names = ["run-header", "run-usage", "steps", "run-todos", "run-verdicts", "run-approvals"]
    for name in names:
        fragment = client.get(f"/runs/run_full/partials/{name}/").content.decode().strip()
        assert fragment.startswith(f'<{"div" if name == "steps" else "section"} id="{name}"')
        if name in ("run-usage", "run-approvals"):  # time bars and countdowns tick
            assert _untimed(fragment) in _untimed(page), name
        else:
            assert fragment in page, name
    step = client.get("/runs/run_full/partials/step/1/").content.decode().strip()
    assert step.startswith('<article id="step-1"') and step in page
    assert client.get("/runs/run_full/partials/step/9/").status_code == 404
    assert client.get("/runs/run_full/partials/nonsense/").status_code == 404


def test_row_fragment_is_the_lists_own_row(client, viewer_a, full_run):
    _, run = full_run
    client.force_login(viewer_a.user)
    row = client.get("/runs/run_full/row/").content.decode().strip()
    assert row.startswith(f'<tr id="run-row-{run.pk}"')
    assert row in client.get("/runs/").content.decode()


def test_run_page_runs_a_constant_number_of_queries(
    client, viewer_a, full_run, django_assert_num_queries
):
    _, run = full_run
    client.force_login(viewer_a.user)
    before = _list_queries(client, "/runs/run_full/")
    for n in range(3, 13):
        Step.objects.create(run=run, number=n, agent_id="support-bot")
        Message.objects.create(run=run, position=n, step=n, role="assistant", content="more")
        Handoff.objects.create(run=run, step=n, to_agent_id="x")
        ApprovalFactory(run=run, step=n, tool_name=f"tool_{n}")
    with django_assert_num_queries(before):
        client.get("/runs/run_full/")


# --- seed_demo ---


def test_seed_demo_makes_consistent_data_the_pages_render(client, viewer_a, tenant_a):
    from django.core.management import call_command

    from approvals.models import Approval
    from runs.models import Run, RunEvent

    call_command("seed_demo", runs=40, tenant=tenant_a.slug, principals=5, seed=3)
    runs = list(Run.objects.filter(tenant=tenant_a))
    assert len(runs) == 40
    assert RunEvent.objects.filter(run__tenant=tenant_a).count() == sum(r.last_seq for r in runs)
    for run in runs[:10]:
        seqs = list(run.events.values_list("seq", flat=True))
        assert seqs == list(range(1, run.last_seq + 1))
        assert run.steps == run.step_rows.count()
    awaiting = [r for r in runs if r.status == "awaiting_approval"]
    pending = Approval.objects.filter(run__in=awaiting, status="pending").count()
    assert pending == len(awaiting)
    # The rollups hold the steps' usage, as ingest would have added it.
    from django.db.models import Sum

    from runs.models import Step, UsageDaily

    rollup = UsageDaily.objects.filter(tenant=tenant_a).aggregate(c=Sum("cost_minor_units"))
    steps = Step.objects.filter(run__tenant=tenant_a).aggregate(c=Sum("cost_minor_units"))
    assert rollup["c"] == steps["c"] == sum(r.cost_minor_units for r in runs)
    client.force_login(viewer_a.user)
    assert client.get("/runs/?limit=200").status_code == 200
    assert client.get(f"/runs/{runs[0].external_id}/").status_code == 200


def test_seed_demo_refuses_bad_input(db):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--runs"):
        call_command("seed_demo", runs=0)
