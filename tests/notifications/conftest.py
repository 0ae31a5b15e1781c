"""The delivery tests' fixtures: a real SMTP server and a real HTTP endpoint on 127.0.0.1
(tests/support/mail.py), mail settings from a URL, no outbox thread."""

from __future__ import annotations

import pytest

from console.settings import email_url_settings
from tests.support.mail import (
    Endpoint,
    SmtpServer,
)


@pytest.fixture
def smtp_server():
    server = SmtpServer().start()
    yield server
    server.stop()


@pytest.fixture
def use_email_url(settings):
    """Point Django's mail settings at a URL exactly as EMAIL_URL would."""

    def use(url: str) -> None:
        for name, value in email_url_settings(url).items():
            setattr(settings, name, value)

    return use


@pytest.fixture
def endpoint(settings):
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True  # a local test endpoint speaks plain http
    served = Endpoint()
    served.thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture(autouse=True)
def no_outbox_thread(settings):
    settings.GAVEL_WEBHOOK_WORKER = False  # tests send the outboxes themselves unless told
    settings.GAVEL_PUBLIC_URL = "https://gavel.example.com"
