"""The mail outbox: sent after commit to a real SMTP server (aiosmtpd on 127.0.0.1), through
Django's email framework configured by EMAIL_URL; a server that is down leaves the mail
pending and retried on the outbox schedule, and nothing else is affected."""

import logging
import time

import pytest
from django.db import transaction
from django.utils import timezone

from approvals.models import DeliveryStatus, WebhookDelivery
from approvals.services import webhooks
from console.core import outbox
from console.models import Principal
from notifications import mail
from notifications.models import EmailState, Notification, OutboundEmail
from tests.support.mail import SmtpServer, budget_alert, free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def leads(tenant_a, lead_a, admin_a):
    Principal.objects.filter(pk=lead_a.pk).update(email="lena@a.example", name="Lena")
    Principal.objects.filter(pk=admin_a.pk).update(email="adam@a.example", name="Adam")
    lead_a.refresh_from_db()
    admin_a.refresh_from_db()
    return [lead_a, admin_a]


def test_mail_is_received_by_a_real_smtp_server(
    tenant_a, leads, smtp_server, use_email_url, settings
):
    use_email_url(smtp_server.url)
    settings.DEFAULT_FROM_EMAIL = "Gavel <alerts@gavel.example.com>"
    budget_alert(tenant=tenant_a, recipients=leads)
    assert mail.emails_run_due() == 2
    received = {m["To"]: m for m in smtp_server.inbox.messages}
    assert set(received) == {"lena@a.example", "adam@a.example"}
    message = received["lena@a.example"]
    assert message["Subject"] == "[Gavel] Budget 'support' reached 80%"
    assert message["From"] == "Gavel <alerts@gavel.example.com>"
    text = message.get_body(preferencelist=("plain",)).get_content()
    html = message.get_body(preferencelist=("html",)).get_content()
    assert "Hello Lena," in text and "https://gavel.example.com/budgets/bud_1/" in text
    assert 'href="https://gavel.example.com/budgets/bud_1/"' in html
    assert {e.mail_from for e in smtp_server.inbox.envelopes} == {"alerts@gavel.example.com"}
    for row in OutboundEmail.objects.all():
        assert row.state == EmailState.SENT and row.attempts == 1 and row.sent_at is not None
    assert mail.emails_run_due() == 0  # sent once


def test_the_server_down_leaves_mail_pending_retried_and_nothing_else_affected(
    tenant_a, leads, use_email_url
):
    port = free_port()
    use_email_url(f"smtp://127.0.0.1:{port}")  # nothing listens there yet
    webhooks.webhook_create(tenant=tenant_a, url="https://hooks.example/")
    with transaction.atomic():
        budget_alert(tenant=tenant_a, recipients=leads)
    now = timezone.now()
    assert mail.emails_run_due(now=now) == 1  # the first refusal stops the batch
    first, second = OutboundEmail.objects.order_by("id")
    assert first.state == EmailState.PENDING and first.attempts == 1
    assert "ConnectionRefused" in first.last_error
    assert first.next_attempt_at == now + timezone.timedelta(seconds=outbox.BACKOFF_SECONDS[0])
    assert second.attempts == 0 and second.last_error == ""  # untouched, still due
    # Nothing else is affected: the notifications and the webhook delivery stand.
    assert Notification.objects.count() == 2
    assert WebhookDelivery.objects.get().status == DeliveryStatus.PENDING
    assert mail.emails_run_due(now=now) == 1  # the second one's turn; the first is not due
    server = SmtpServer(port=port).start()
    try:
        later = now + timezone.timedelta(seconds=outbox.BACKOFF_SECONDS[0] + 1)
        assert mail.emails_run_due(now=later) == 2
    finally:
        server.stop()
    assert {m["To"] for m in server.inbox.messages} == {"lena@a.example", "adam@a.example"}
    for row in OutboundEmail.objects.all():
        assert row.state == EmailState.SENT and row.attempts == 2


def test_mail_gives_up_after_the_last_attempt(tenant_a, leads, use_email_url):
    use_email_url(f"smtp://127.0.0.1:{free_port()}")
    budget_alert(tenant=tenant_a, recipients=leads[:1])
    moment = timezone.now()
    for _ in range(outbox.MAX_ATTEMPTS):
        assert mail.emails_run_due(now=moment) == 1
        moment += timezone.timedelta(hours=2)
    row = OutboundEmail.objects.get()
    assert row.state == EmailState.FAILED and row.attempts == outbox.MAX_ATTEMPTS
    assert mail.emails_run_due(now=moment) == 0


def test_a_refused_recipient_fails_only_its_own_mail(tenant_a, leads, use_email_url):
    class Picky:
        def __init__(self):
            self.accepted = []

        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
            if address.startswith("lena@"):
                return "550 no such mailbox"
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server, session, envelope):
            self.accepted.extend(envelope.rcpt_tos)
            return "250 OK"

    from aiosmtpd.controller import Controller

    handler = Picky()
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port, ready_timeout=5)
    controller.start()
    try:
        use_email_url(f"smtp://127.0.0.1:{port}")
        budget_alert(tenant=tenant_a, recipients=leads)
        assert mail.emails_run_due() == 2  # the refusal did not stop the batch
    finally:
        controller.stop()
    assert handler.accepted == ["adam@a.example"]
    lena = OutboundEmail.objects.get(to="lena@a.example")
    assert lena.state == EmailState.PENDING and "SMTPRecipientsRefused" in lena.last_error
    assert OutboundEmail.objects.get(to="adam@a.example").state == EmailState.SENT


def test_credentials_in_the_url_log_in(tenant_a, leads, use_email_url):
    from aiosmtpd.smtp import AuthResult

    seen = []

    def authenticator(server, session, envelope, mechanism, auth_data):
        seen.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data.password == b"p@ss:w/rd")

    server = SmtpServer(
        auth_required=True, auth_require_tls=False, authenticator=authenticator
    ).start()
    try:
        use_email_url(f"smtp://gavel%40a.example:p%40ss%3Aw%2Frd@127.0.0.1:{server.port}")
        budget_alert(tenant=tenant_a, recipients=leads[:1])
        assert mail.emails_run_due() == 1
    finally:
        server.stop()
    assert seen == [(b"gavel@a.example", b"p@ss:w/rd")]
    assert OutboundEmail.objects.get().state == EmailState.SENT


def test_without_email_url_mail_is_written_to_the_server_log(tenant_a, leads, settings, caplog):
    settings.EMAIL_BACKEND = "notifications.mail.LogEmailBackend"  # what EMAIL_URL unset sets
    budget_alert(tenant=tenant_a, recipients=leads[:1])
    with caplog.at_level(logging.INFO, logger="notifications.mail"):
        assert mail.emails_run_due() == 1
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "mail to lena@a.example (EMAIL_URL is unset: logged, not sent)" in logged
    assert "Subject: [Gavel] Budget 'support' reached 80%" in logged
    assert OutboundEmail.objects.get().state == EmailState.SENT


@pytest.mark.django_db(transaction=True)
def test_after_commit_the_server_thread_sends_webhooks_and_leaves_mail_to_the_sweep(
    tenant_a, leads, smtp_server, use_email_url, endpoint, settings
):
    """Commit wakes this process's outbox thread: it delivers the webhook, and does no mail
    work at all (mail is `sweep_only`: never a server process's CPU); the sweep sends it."""
    from io import StringIO

    from django.core.management import call_command

    use_email_url(smtp_server.url)
    webhooks.webhook_create(tenant=tenant_a, url=endpoint.url)
    settings.GAVEL_WEBHOOK_WORKER = True
    try:
        with transaction.atomic():
            budget_alert(tenant=tenant_a, recipients=leads)
            time.sleep(0.2)
            assert not smtp_server.inbox.envelopes and not endpoint.requests  # not before commit
        assert endpoint.received.wait(10)
        time.sleep(0.5)  # the thread's round is over: it sent no mail, and will send none
        assert not smtp_server.inbox.envelopes
        assert OutboundEmail.objects.filter(state=EmailState.PENDING).count() == 2
    finally:
        outbox.stop()
    assert endpoint.json()["event"] == "budget.threshold_crossed"
    out = StringIO()
    call_command("expire_approvals", stdout=out)  # the sweep, once
    assert "2 emails" in out.getvalue() and "0 webhook deliveries" in out.getvalue()
    assert len(smtp_server.inbox.envelopes) == 2


def test_a_server_thread_runs_no_mail_sender_and_the_sweep_runs_them_all():
    in_server = set(outbox.run_due(in_server=True))
    assert "webhook deliveries" in in_server
    assert not in_server & {"emails", "call mail"}
    assert {"emails", "call mail", "webhook deliveries"} <= set(outbox.run_due())


def test_one_round_sends_its_mails_over_one_smtp_session(
    tenant_a, leads, smtp_server, use_email_url
):
    use_email_url(smtp_server.url)
    budget_alert(tenant=tenant_a, recipients=leads)
    budget_alert(tenant=tenant_a, recipients=leads)
    assert mail.emails_run_due() == 4
    assert len(smtp_server.inbox.envelopes) == 4
    assert len(smtp_server.inbox.sessions) == 1  # not one connection per mail


def test_the_sweep_sends_what_a_crash_left_due(
    tenant_a, leads, smtp_server, use_email_url, endpoint
):
    """Rows written and committed, the process gone before sending: the sweep sends them."""
    from io import StringIO

    from django.core.management import call_command

    use_email_url(smtp_server.url)
    webhooks.webhook_create(tenant=tenant_a, url=endpoint.url)
    budget_alert(tenant=tenant_a, recipients=leads)
    out = StringIO()
    call_command("expire_approvals", stdout=out)
    assert "2 emails" in out.getvalue() and "1 webhook deliveries" in out.getvalue()
    assert len(smtp_server.inbox.envelopes) == 2
    assert len(endpoint.requests) == 1
