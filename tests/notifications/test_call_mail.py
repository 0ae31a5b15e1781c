"""Mail about new calls, against a real SMTP server (aiosmtpd): "now" is one mail per batch of
calls (per request that held them) to each principal who chose it and may decide one of them;
the digest lists, on its schedule, the calls since the last one that still wait; "off" sends
none. The request writes one durable batch row and never waits on the mail server."""

import pytest
from django.utils import timezone

from approvals.models import Approval
from console.core import outbox
from console.models import Principal
from notifications import calls
from notifications.models import CallBatch, EmailState, OutboundEmail
from notifications.preferences import notification_settings_update
from tests.support.factories import PrincipalFactory
from tests.support.mail import free_port

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs"


def admit(api, run_id="run_m", principal="alice@a.example"):
    body = {"id": run_id, "agentId": "support-bot", "agentVersion": 1, "principalId": principal}
    assert api.post(RUNS, body).status_code in (200, 201)


def call(n, tool="email.send"):
    return {"toolCallId": f"call_{n}", "toolName": tool, "arguments": {"to": f"c{n}@acme.com"},
            "reason": f"mail number {n}", "rejectionMessage": "Not sent."}  # fmt: skip


def hold(api, calls_, run_id="run_m", seq=1):
    event = {"seq": seq, "type": "approval.requested", "step": 1, "calls": calls_}
    response = api.post(f"{RUNS}/{run_id}/events", {"events": [event]})
    assert response.status_code == 200, response.content


def choose(principal, email, address, **fields):
    Principal.objects.filter(pk=principal.pk).update(email=address)
    principal.refresh_from_db()
    notification_settings_update(viewer=principal, fields={"email": email, **fields})


def send_all(now=None):
    """What the sweep process does after expiry, reminders and escalations: every sender once
    (the call sender before the mail sender: the mail it writes leaves in the same round)."""
    outbox.run_due(now=now)


@pytest.fixture
def people(tenant_a, admin_a, lead_a, reviewer_a, viewer_a):
    PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    choose(reviewer_a, "now", "rita@a.example")
    choose(lead_a, "now", "lena@a.example")
    choose(viewer_a, "now", "vic@a.example")  # may not decide: never mailed of calls
    choose(admin_a, "off", "adam@a.example")
    return {"reviewer": reviewer_a, "lead": lead_a, "viewer": viewer_a, "admin": admin_a}


def bodies(server, to):
    found = [m for m in server.inbox.messages if m["To"] == to]
    return [
        (
            m["Subject"],
            m.get_body(preferencelist=("plain",)).get_content(),
            m.get_body(preferencelist=("html",)).get_content(),
        )
        for m in found
    ]


def test_now_mails_each_decider_once_per_batch_with_every_call(
    ingest_a, people, smtp_server, use_email_url
):
    use_email_url(smtp_server.url)
    admit(ingest_a)
    hold(ingest_a, [call(1), call(2), call(3)])
    assert CallBatch.objects.count() == 1 and not OutboundEmail.objects.exists()  # not yet
    send_all()
    assert sorted(m["To"] for m in smtp_server.inbox.messages) == [
        "lena@a.example",
        "rita@a.example",
    ]  # the viewer may not decide, the admin chose "off"
    [(subject, text, html)] = bodies(smtp_server, "rita@a.example")
    assert subject == "[Gavel] 3 new calls wait for your decision"
    for n in (1, 2, 3):
        approval = Approval.objects.get(tool_call_id=f"call_{n}")
        url = f"https://gavel.example.com/approvals/{approval.public_id}/"
        assert url in text and f'href="{url}"' in html
        assert f"mail number {n}" in text and f"c{n}@acme.com" in text
    assert "Run cost:  $0.00 (run run_m)" in text and "(for alice@a.example)" in text
    # A second batch: one more mail each, of its call alone.
    hold(ingest_a, [call(4)], seq=2)
    send_all()
    assert len(bodies(smtp_server, "rita@a.example")) == 2
    subject, text, _ = bodies(smtp_server, "rita@a.example")[1]
    assert subject == "[Gavel] A call waits for your decision: email.send"
    assert "call_4" not in text and "mail number 4" in text and "mail number 1" not in text
    assert not bodies(smtp_server, "adam@a.example") and not bodies(smtp_server, "vic@a.example")


def test_the_request_leaves_the_mail_to_the_sweep_process(
    ingest_a, people, smtp_server, use_email_url, django_capture_on_commit_callbacks
):
    """The request writes the batch and wakes nothing for it (a server process does no mail
    work); one sweep expands it and sends the mail."""
    from io import StringIO

    from django.core.management import call_command

    use_email_url(smtp_server.url)
    admit(ingest_a)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        hold(ingest_a, [call(1), call(2)])
    assert outbox.kick not in callbacks  # no webhook endpoint: nothing else to send at once
    assert CallBatch.objects.get().mailed_at is None and not OutboundEmail.objects.exists()
    out = StringIO()
    call_command("expire_approvals", stdout=out)
    assert "1 call mail" in out.getvalue() and "2 emails" in out.getvalue()
    assert sorted(m["To"] for m in smtp_server.inbox.messages) == [
        "lena@a.example",
        "rita@a.example",
    ]
    assert CallBatch.objects.get().mailed_at is not None


def test_a_batch_is_mailed_once_however_many_senders_run(ingest_a, people):
    admit(ingest_a)
    hold(ingest_a, [call(1)])
    assert calls.call_batches_run_due() == 1
    assert calls.call_batches_run_due() == 0  # claimed: the next sender finds nothing
    assert OutboundEmail.objects.count() == 2


def test_a_call_decided_before_the_mail_is_written_is_not_listed(ingest_a, people, decide_a):
    admit(ingest_a)
    hold(ingest_a, [call(1), call(2)])
    first = Approval.objects.get(tool_call_id="call_1")
    assert decide_a.post(f"/api/v1/approvals/{first.public_id}/decision",
                         {"decision": "deny"}).status_code == 200  # fmt: skip
    calls.call_batches_run_due()
    mail = OutboundEmail.objects.get(to="lena@a.example")
    assert "mail number 2" in mail.text_body and "mail number 1" not in mail.text_body


def test_another_tenants_deciders_hear_nothing(ingest_a, people, tenant_b, reviewer_b):
    choose(reviewer_b, "now", "rob@b.example")
    admit(ingest_a)
    hold(ingest_a, [call(1)])
    calls.call_batches_run_due()
    assert not OutboundEmail.objects.filter(to="rob@b.example").exists()


def test_the_digest_lists_what_still_waits_on_its_schedule(
    ingest_a, people, reviewer_a, smtp_server, use_email_url
):
    use_email_url(smtp_server.url)
    choose(reviewer_a, "digest", "rita@a.example", digest_minutes=30)
    admit(ingest_a)
    hold(ingest_a, [call(1), call(2)])
    hold(ingest_a, [call(3)], seq=2)
    now = timezone.now()
    send_all(now=now)
    assert not bodies(smtp_server, "rita@a.example")  # not due for 30 minutes
    later = now + timezone.timedelta(minutes=31)
    send_all(now=later)
    [(subject, text, _)] = bodies(smtp_server, "rita@a.example")
    assert subject == "[Gavel] Digest: 3 calls still wait for a decision"
    assert all(f"mail number {n}" in text for n in (1, 2, 3))
    send_all(now=later)  # once per interval
    send_all(now=later + timezone.timedelta(minutes=31))  # nothing new since: no mail
    assert len(bodies(smtp_server, "rita@a.example")) == 1
    assert len(bodies(smtp_server, "lena@a.example")) == 2  # "now": one per batch


def test_off_sends_no_mail_of_new_calls(ingest_a, tenant_a, reviewer_a, lead_a):
    PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    choose(reviewer_a, "off", "rita@a.example")
    Principal.objects.filter(pk=lead_a.pk).update(email="lena@a.example")  # never chose
    admit(ingest_a)
    hold(ingest_a, [call(1)])
    later = timezone.now() + timezone.timedelta(days=2)
    send_all(now=later)
    assert not OutboundEmail.objects.exists()


def test_the_mail_server_down_does_not_touch_ingest_or_decisions_and_mail_is_retried(
    ingest_a, people, decide_a, use_email_url, smtp_server
):
    port = free_port()
    use_email_url(f"smtp://127.0.0.1:{port}")  # nothing listens
    admit(ingest_a)
    hold(ingest_a, [call(1), call(2)])
    send_all()
    mails = list(OutboundEmail.objects.order_by("id"))
    assert len(mails) == 2 and mails[0].attempts == 1 and "Connection" in mails[0].last_error
    assert all(m.state == EmailState.PENDING for m in mails)
    hold(ingest_a, [call(3)], seq=2)  # ingest goes on
    approval = Approval.objects.get(tool_call_id="call_2")
    url = f"/api/v1/approvals/{approval.public_id}/decision"
    assert decide_a.post(url, {"decision": "approve"}).status_code == 200  # and decisions
    use_email_url(smtp_server.url)  # the server is back: the retries go through
    send_all(now=timezone.now() + timezone.timedelta(minutes=5))
    assert {m.state for m in OutboundEmail.objects.all()} == {EmailState.SENT}
    assert len(smtp_server.inbox.messages) == 4  # two batches, two deciders each
