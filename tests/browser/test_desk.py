"""The reviewer's desk in a real browser: the card page from a mail link (signed out, then in),
300 pending calls decided from the keyboard alone with the focus never lost, a bulk denial of 50
calls across runs, counts equal to what each persona may decide, Esc leaving the message box.

Rows are made before `page` is asked for (the ORM refuses to run beside Playwright's loop)."""

import pytest
from django.utils import timezone

from tests.support.browser import shot, sign_in
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FOCUSED_ROW = (
    "() => !!document.activeElement && document.activeElement.classList.contains('desk-row')"
)
COUNT_IS = "(n) => document.querySelector('#desk-count').dataset.count === String(n)"
SETTLED = """([n, focused]) => document.querySelector('#desk-count').dataset.count === String(n)
  && (!focused || (document.activeElement.classList.contains('desk-row')
  && document.querySelector('#desk-pane article.approval-card')
  && document.querySelector('#desk-pane article.approval-card').dataset.approvalId
     === document.activeElement.dataset.approvalId))"""


def _calls(tenant, n, *, runs=10, tool="send_email", start=0):
    now = timezone.now()
    made = []
    run_list = [RunFactory(tenant=tenant, external_id=f"run_desk_{start + i}") for i in range(runs)]
    for i in range(n):
        made.append(
            ApprovalFactory(
                run=run_list[i % runs],
                tool_call_id=f"call_{start + i}",
                tool_name=tool,
                arguments={"to": f"user{i}@example.com"},
                requested_at=now - timezone.timedelta(seconds=n - i),
            )
        )
    return made


def orm(fn):
    """Run ORM reads beside Playwright's loop: in a thread of their own (own connection)."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    def run():
        try:
            return fn()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def _statuses(calls) -> list[str]:
    from approvals.models import Approval

    pks = [c.pk for c in calls]
    return orm(
        lambda: list(
            Approval.objects.filter(pk__in=pks).order_by("pk").values_list("status", flat=True)
        )
    )


@pytest.fixture
def one(tenant_a, reviewer_a):
    return _calls(tenant_a, 1)


@pytest.fixture
def three_hundred(tenant_a, reviewer_a):
    return _calls(tenant_a, 300, runs=30)


@pytest.fixture
def sixty(tenant_a, reviewer_a):
    own = RunFactory(tenant=tenant_a, external_id="run_reviewers_own", principal=reviewer_a)
    ApprovalFactory(run=own, tool_call_id="own_1")  # never listed: the reviewer's own run
    return _calls(tenant_a, 60, runs=12)


@pytest.fixture
def three(tenant_a, reviewer_a):
    return _calls(tenant_a, 3, runs=3)


@pytest.fixture
def two(tenant_a, reviewer_a):
    return _calls(tenant_a, 2)


def _count(page) -> int:
    return int(page.locator("#desk-count").get_attribute("data-count"))


def test_the_card_page_from_a_mail_link_signs_in_and_lands_on_the_card_styled(one, page):
    [call] = one
    link = f"{page.base_url}/approvals/{call.public_id}/"
    page.goto(link, wait_until="domcontentloaded", timeout=30_000)  # signed out: sign in, back
    assert "/accounts/login/" in page.url
    page.get_by_label("Email", exact=True).fill("reviewer@a.example")
    page.get_by_label("Password").fill("reviewer-pass-123")
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(link)
    card = page.locator(f"#approval-{call.public_id}")
    card.wait_for()
    assert page.title() == "send_email · Pending · Gavel"
    assert page.locator("html").get_attribute("lang") == "en"
    assert page.locator("main#main").count() == 1 and page.locator("h1").count() == 1
    assert page.locator("nav[aria-label='Main']").is_visible()
    # Styled: the console's stylesheet and the desk's are applied (Bulma's box, our buttons).
    approve = card.get_by_role("button", name="Approve")
    assert (
        approve.evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(23, 112, 63)"
    )  # the theme's --gavel-ok (#17703f): white on it 5.9:1
    assert card.evaluate("c => getComputedStyle(c).borderRadius") != "0px"
    shot(page, "desk-card-page-from-mail")
    # Deciding there stays there and says what happened.
    with page.expect_response(lambda r: "/decision/" in r.url):
        approve.click()
    card.locator(".decided-status").wait_for()
    assert page.url == link and "Approved" in card.inner_text()
    # Signed in already, the link opens the card at once.
    page.goto(link, wait_until="domcontentloaded")
    assert page.url == link and "Approved" in page.locator("main").inner_text()


def test_three_hundred_calls_all_decided_from_the_keyboard_focus_never_lost(three_hundred, page):
    calls = three_hundred
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    page.wait_for_function(FOCUSED_ROW)
    assert _count(page) == 300
    assert page.locator("li.desk-row").count() == 50  # one keyset page; the rest on demand
    first = page.evaluate("document.activeElement.dataset.approvalId")
    assert first == calls[0].public_id
    page.keyboard.press("j")
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.dataset.approvalId") == first
    for left in range(300, 0, -1):
        page.keyboard.press("a" if left % 3 else "d")
        # The count says the decision landed; the focus is on a row whose card is in the pane.
        page.wait_for_function(SETTLED, arg=[left - 1, left > 1])
    page.wait_for_function(COUNT_IS, arg=0)
    assert page.locator("li.desk-row").count() == 0
    assert page.evaluate("document.activeElement.tagName") == "H1"
    assert set(_statuses(calls)) == {"approved", "denied"}


def test_bulk_deny_of_fifty_calls_across_runs(sixty, page):
    calls = sixty
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    page.wait_for_function(FOCUSED_ROW)
    assert _count(page) == 60
    page.keyboard.press("x")  # the first
    for _ in range(49):
        page.keyboard.press("j")
    page.keyboard.press("Shift+X")  # ...to the fiftieth
    assert page.locator("[data-desk-selected]").inner_text() == "50 selected"
    shot(page, "desk-bulk-selected", full_page=False)
    with page.expect_response(lambda r: r.url.endswith("/api/v1/approvals/decisions")) as info:
        page.locator("[data-desk-bulk='deny']").click()
    assert info.value.json()["decided"] == 50
    page.wait_for_function(COUNT_IS, arg=10)
    # Focus stays in the list, on a call still pending (which one of them depends on whether
    # the second page arrived before the decision: see the closing note of 2026-12-05).
    page.wait_for_function(
        "(ids) => ids.includes((document.activeElement || {dataset: {}}).dataset.approvalId)",
        arg=[c.public_id for c in calls[50:]],
    )
    assert "Denied 50 calls" in page.locator("#desk-status").inner_text()
    assert _statuses(calls[:50]) == ["denied"] * 50
    assert _statuses(calls[50:]) == ["pending"] * 10


def test_a_call_decided_meanwhile_is_reported_and_the_others_are_decided(three, page):
    calls = three
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    page.wait_for_function(FOCUSED_ROW)
    # Someone else decides the second call meanwhile (no socket here): it is reported.
    from approvals.models import Approval

    orm(
        lambda: Approval.objects.filter(pk=calls[1].pk).update(
            status="approved", decided_at=timezone.now()
        )
    )
    page.keyboard.press("x")
    page.keyboard.press("j")
    page.keyboard.press("x")
    page.keyboard.press("d")
    page.wait_for_function(COUNT_IS, arg=1)
    assert "1 decided already" in page.locator("#desk-status").inner_text()


def test_e_edits_the_message_and_esc_leaves_it_without_typing_into_it(two, page):
    calls = two
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    page.wait_for_function(FOCUSED_ROW)
    page.keyboard.press("e")
    box = page.locator("#desk-pane textarea.decision-message")
    assert page.evaluate("document.activeElement.classList.contains('decision-message')")
    page.keyboard.type("Ask Alice first.")
    page.keyboard.press("Escape")
    page.wait_for_function(FOCUSED_ROW)
    page.keyboard.press("j")  # moves: nothing typed into the message
    page.keyboard.press("k")
    page.locator(f"#desk-pane #approval-{calls[0].public_id}").wait_for()
    assert box.input_value() == "Ask Alice first."  # kept while the reviewer looked elsewhere
    page.keyboard.press("?")
    assert page.locator("#desk-keys").is_visible()
    page.keyboard.press("Escape")
    assert not page.locator("#desk-keys").is_visible()
    page.keyboard.press("d")
    page.wait_for_function(COUNT_IS, arg=1)
    from approvals.models import Approval

    denied = orm(lambda: Approval.objects.values("status", "message").get(pk=calls[0].pk))
    assert denied == {"status": "denied", "message": "Ask Alice first."}


@pytest.fixture
def personas(tenant_a, reviewer_a, lead_a, admin_a):
    from approvals import selectors_desk
    from budgets.models import Budget, BudgetOverride
    from console.models import Role

    _calls(tenant_a, 6, runs=3)
    _calls(tenant_a, 1, runs=1, tool="send_sms", start=100)
    own = RunFactory(tenant=tenant_a, external_id="run_lead_own", principal=lead_a)
    ApprovalFactory(run=own, tool_call_id="lead_own")
    for name, leads in (("Led", [lead_a]), ("Unled", [])):
        budget = Budget.objects.create(
            tenant=tenant_a, name=name, scope_type="tenant", period="day", ceiling_minor_units=10
        )
        budget.leads.set(leads)
        run = RunFactory(tenant=tenant_a, external_id=f"run_over_{name}")
        call = ApprovalFactory(run=run, tool_name="budget.override", tool_call_id=f"o_{name}")
        BudgetOverride.objects.create(
            approval=call, budget=budget, run=run, estimated_cost_minor_units=5
        )
    sms = Role.objects.create(
        tenant=tenant_a,
        name="sms-only",
        capabilities=["view_runs", "decide"],
        decide_tools=["send_sms"],
    )
    erin = PrincipalFactory(tenant=tenant_a, external_id="erin@a.example", password="erin-pass-123")
    erin.roles.set([sms])
    people = (reviewer_a, lead_a, admin_a, erin)
    return {p.external_id: selectors_desk.desk_count(viewer=p) for p in people}


def test_counts_equal_what_each_persona_may_decide(personas, page):
    # The reviewer: the 7 tool calls and the lead's run, no override; the lead: the tool calls
    # but its own run's, and both overrides (one it leads, one no one leads: manage_budgets);
    # the admin: every tool call and the unled override; erin: the one send_sms call.
    assert personas == {
        "reviewer@a.example": 8,
        "lead@a.example": 9,
        "admin@a.example": 9,
        "erin@a.example": 1,
    }
    for who, password in (
        ("reviewer@a.example", "reviewer-pass-123"),
        ("lead@a.example", "lead-pass-123"),
        ("admin@a.example", "admin-pass-123"),
        ("erin@a.example", "erin-pass-123"),
    ):
        page.context.clear_cookies()
        sign_in(page, who, password, next_path="/approvals/")
        nav = page.locator("#nav-pending-count").inner_text().split()[0]
        rows = page.locator("li.desk-row").count()
        assert (int(nav), _count(page), rows) == (personas[who],) * 3, who
        shot(page, f"desk-persona-{who.split('@')[0]}", full_page=False)


@pytest.fixture
def mail_calls(tenant_a, lead_a):
    now = timezone.now()
    made = []
    for i, to in enumerate(["bob@acme.com", "ann@acme.com", "cy@acme.com", "x@evil.com"]):
        run = RunFactory(tenant=tenant_a, external_id=f"run_mail_{i}", current_agent_id="mailer")
        made.append(
            ApprovalFactory(
                run=run,
                tool_name="email.send",
                arguments={"to": to, "subject": f"Report {i}"},
                requested_at=now - timezone.timedelta(minutes=10 - i),
            )
        )
    return made


def test_a_rule_generalised_from_a_card_decides_the_matching_waiting_calls(mail_calls, page):
    sign_in(page, "lead@a.example", "lead-pass-123", next_path="/approvals/")
    page.wait_for_function(FOCUSED_ROW)
    assert _count(page) == 4
    page.locator("#desk-pane").get_by_role("link", name="Always approve calls like this").click()
    page.wait_for_url("**/rules/new/?approval=*")
    # The address's domain is suggested; the subject would be copied exactly: make it "any".
    assert page.locator("input[name='arg_to'][value='suggested']").is_checked()
    page.locator("input[name='arg_subject'][value='any']").check()
    page.locator(".preview-waiting").filter(has_text="3 calls waiting now").wait_for()
    shot(page, "desk-rule-from-card", full_page=False)
    page.get_by_label("Also decide the calls waiting now").check()
    page.get_by_role("button", name="Save rule").click()
    page.wait_for_url("**/rules/?saved=*")
    assert "You decided 3 waiting calls with it." in page.locator(".rule-saved").inner_text()
    assert _statuses(mail_calls) == ["approved", "approved", "approved", "pending"]
    page.goto(f"{page.base_url}/approvals/")
    page.wait_for_function(FOCUSED_ROW)
    assert _count(page) == 1
