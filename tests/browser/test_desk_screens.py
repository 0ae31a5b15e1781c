"""Screenshots of the desk and the card page at 1440 px and 390 px, light and dark
(build/screenshots/desk-*.png; with GAVEL_DOCS_SCREENSHOTS=1, as `make screenshots` sets it,
also docs/screenshots/): a realistic queue (tools, agents, people, costs, budgets, verdicts,
taint), and no horizontal overflow at either width."""

import pytest
from django.utils import timezone

from tests.support.browser import shot, sign_in
from tests.support.docs import _docs_copy
from tests.support.factories import AgentFactory, ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queue(tenant_a, reviewer_a):
    now = timezone.now()
    people = [
        PrincipalFactory(tenant=tenant_a, external_id=f"{n}@example.com", name=n.title())
        for n in ("dana", "omar", "li")
    ]
    agents = [AgentFactory(tenant=tenant_a, external_id=a) for a in ("support-bot", "sql-analyst")]
    calls = [
        (
            "send_email",
            {"to": "dana@acme.com", "subject": "Outage summary", "body": "Hi Dana, " * 30},
            "mail leaves the company",
        ),
        (
            "refund_payment",
            {"invoice": "INV-88", "amount": 4200},
            "refunds over 20.00 need a human",
        ),
        (
            "run_sql",
            {"query": "DELETE FROM sessions WHERE created_at < now() - interval '30 days'"},
            "writes to production",
        ),
        ("write_file", {"path": "/srv/reports/2026/q4.csv", "content": "a,b\n1,2"}, ""),
        (
            "send_email",
            {"to": "omar@partner.io", "subject": "Contract draft"},
            "mail leaves the company",
        ),
        ("http_post", {"url": "https://hooks.example.org/deploy", "body": {"ref": "main"}}, ""),
        ("send_slack", {"channel": "#ops", "text": "Deploy finished"}, ""),
        ("refund_payment", {"invoice": "INV-91", "amount": 900}, "refunds over 5.00 need a human"),
    ]
    for i, (tool, args, reason) in enumerate(calls * 2):
        run = RunFactory(
            tenant=tenant_a,
            external_id=f"run_{7310 + i}",
            agent=agents[i % 2],
            current_agent_id=agents[i % 2].external_id,
            principal=people[i % 3],
            cost_minor_units=37 * (i + 1),
            limits={"costCeilingMinorUnits": 400},
            verdicts={"1:0": {"verdict": "flagged", "guard": "pii", "reason": "an address"}}
            if i % 5 == 1
            else {},
            taint_summary={"untrustedWebContent": True} if i % 4 == 3 else {},
        )
        ApprovalFactory(
            run=run,
            tool_call_id=f"call_{i}",
            tool_name=tool,
            arguments=args,
            reason=reason,
            requested_at=now - timezone.timedelta(minutes=14 - i * 0.8),
        )


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_desk_and_card_screenshots(queue, page, width, height, scheme):
    page.set_viewport_size({"width": width, "height": height})
    page.emulate_media(color_scheme=scheme)
    sign_in(page, "reviewer@a.example", "reviewer-pass-123", next_path="/approvals/")
    page.locator("li.desk-row").first.wait_for()
    page.wait_for_timeout(300)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the desk overflows by {overflow} px at {width}"
    name = f"desk-inbox-{width}-{scheme}"
    _docs_copy(shot(page, name, full_page=False), f"{name}.png")
    card_id = page.locator("li.desk-row").first.get_attribute("data-approval-id")
    page.goto(f"{page.base_url}/approvals/{card_id}/")
    page.locator("article.approval-card").wait_for()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the card page overflows by {overflow} px at {width}"
    name = f"desk-card-{width}-{scheme}"
    _docs_copy(shot(page, name), f"{name}.png")
