"""Sending the mail outbox (`OutboundEmail` rows) through Django's email framework.

`EMAIL_URL` picks the backend (console/settings.py); unset, `LogEmailBackend` writes each mail
to the server's log. Rows are claimed with a conditional UPDATE (a lease) so two processes
never send one attempt twice, and retried on the outbox schedule (console/outbox.py). When the
mail server cannot be reached the batch stops at the first failure: the rest stay due, untouched,
for the next attempt; a refusal of one message (a bad recipient) affects only that message.
"""

from __future__ import annotations

import logging
import smtplib

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.mail.backends.base import BaseEmailBackend
from django.utils import timezone

from console.core import outbox
from notifications.models import EmailState, OutboundEmail
from ops.context import Lifecycle

log = logging.getLogger(__name__)

# A refusal of this one message: the next message may well go through.
MESSAGE_ERRORS = (
    smtplib.SMTPRecipientsRefused,
    smtplib.SMTPSenderRefused,
    smtplib.SMTPDataError,
    smtplib.SMTPNotSupportedError,
    UnicodeError,
    ValueError,
)


class LogEmailBackend(BaseEmailBackend):
    """EMAIL_URL unset: each mail is written to the server's log (nothing leaves the machine)."""

    def send_messages(self, email_messages):
        for message in email_messages:
            log.info(
                "mail to %s (EMAIL_URL is unset: logged, not sent)\n%s",
                ", ".join(message.recipients()),
                message.message().as_string(),
            )
        return len(email_messages)


def email_queue(*, tenant, to: str, subject: str, text_body: str) -> OutboundEmail:
    """One mail a platform room queues (console.core.outbox.mail): a row of this outbox."""
    return OutboundEmail.objects.create(tenant=tenant, to=to, subject=subject, text_body=text_body)


def _claim(email: OutboundEmail, now) -> bool:
    return outbox.claim(email, now, pending=EmailState.PENDING, state_field="state")


def _message(email: OutboundEmail, connection) -> EmailMultiAlternatives:
    message = EmailMultiAlternatives(
        subject=email.subject,
        body=email.text_body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[email.to],
        connection=connection,
    )
    if email.html_body:
        message.attach_alternative(email.html_body, "text/html")
    return message


def _send(email: OutboundEmail, connection) -> tuple[str, bool]:
    """(error or "", whether the server itself failed). Never raises. The connection is opened
    here if it is not open and left open: the round's mails share one SMTP session (a backend's
    `send_messages` closes only a connection it opened itself)."""
    try:
        connection.open()
        sent = connection.send_messages([_message(email, connection)])
    except MESSAGE_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}"[:1000], False
    except Exception as exc:  # refused, timed out, disconnected, bad credentials
        return f"{type(exc).__name__}: {exc}"[:1000], True
    return ("" if sent else "the mail backend sent nothing"), not sent


def _record(email: OutboundEmail, error: str, now) -> None:
    attempts = email.attempts + 1
    fields = {"attempts": attempts, "last_error": error}
    retry_at = outbox.next_attempt(attempts=attempts, now=now)
    if not error:
        fields.update(state=EmailState.SENT, sent_at=now)
    elif retry_at is None:
        fields.update(state=EmailState.FAILED)
    else:
        fields.update(next_attempt_at=retry_at)
    OutboundEmail.objects.filter(pk=email.pk).update(**fields)


def emails_run_due(*, now=None, limit: int = 200) -> int:
    """Attempt every due mail once (one connection for the round, opened anew only after a
    failure). Returns how many were attempted."""
    now = now or timezone.now()
    due = list(
        OutboundEmail.objects.filter(state=EmailState.PENDING, next_attempt_at__lte=now).order_by(
            "next_attempt_at", "id"
        )[:limit]
    )
    if not due:
        return 0
    attempted = 0
    connection = get_connection(fail_silently=False)
    try:
        for email in due:
            if Lifecycle.draining:  # the worker is stopping: the rest stay due (ops/worker.py)
                break
            if not _claim(email, now):
                continue
            error, server_failed = _send(email, connection)
            _record(email, error, now)
            attempted += 1
            if error:
                log.warning("mail %s to %s not sent: %s", email.pk, email.to, error)
                _close(connection)  # the next mail starts a fresh session
            if server_failed:
                break  # the rest stay due: the next attempt finds the server (or not) afresh
    finally:
        _close(connection)
    return attempted


def _close(connection) -> None:
    try:
        connection.close()
    except Exception:  # a connection that never opened, or died: nothing to close
        log.debug("closing the mail connection failed", exc_info=True)


def email_next_due():
    """When the soonest pending mail is due (None: nothing pending)."""
    return outbox.soonest_due(OutboundEmail.objects.filter(state=EmailState.PENDING))
