"""A real SMTP server (aiosmtpd) and a real HTTP endpoint on 127.0.0.1 for the delivery
tests, and a helper that notifies as the budgets code will (their fixtures are in
tests/notifications/conftest.py)."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Inbox:
    """What the SMTP server received, parsed."""

    def __init__(self):
        self.envelopes = []
        self.sessions = []  # each SMTP session (connection) that delivered mail, once
        self.received = threading.Event()

    async def handle_DATA(self, server, session, envelope):
        self.envelopes.append(envelope)
        if not any(seen is session for seen in self.sessions):
            self.sessions.append(session)
        self.received.set()
        return "250 OK"

    @property
    def messages(self):
        return [
            email.message_from_bytes(e.original_content, policy=email.policy.default)
            for e in self.envelopes
        ]


class SmtpServer:
    def __init__(self, port: int | None = None, **options):
        from aiosmtpd.controller import Controller

        self.port = port or free_port()
        self.inbox = Inbox()
        self.controller = Controller(
            self.inbox, hostname="127.0.0.1", port=self.port, ready_timeout=5, **options
        )

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def start(self):
        self.controller.start()
        return self

    def stop(self):
        self.controller.stop()


class Endpoint:
    """An HTTP server on 127.0.0.1 that records each POST and answers `status`."""

    def __init__(self, status: int = 204):
        self.requests: list[dict] = []
        self.received = threading.Event()
        self.status = status
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                endpoint.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                self.send_response(endpoint.status)
                self.end_headers()
                endpoint.received.set()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/gavel"

    def json(self, index: int = 0) -> dict:
        return json.loads(self.requests[index]["body"])


def budget_alert(*, tenant, recipients, **overrides):
    """`notify` as the budgets code calls it when a threshold is crossed."""
    from notifications.services import notify

    arguments = {
        "tenant": tenant,
        "kind": "budget.threshold_crossed",
        "recipients": recipients,
        "title": "Budget 'support' reached 80%",
        "body": "8.00 USD of 10.00 USD spent this month.",
        "url": "/budgets/bud_1/",
        "webhook_event": "budget.threshold_crossed",
        "webhook_payload": {
            "budget": {"id": "bud_1", "name": "support"},
            "threshold": 80,
            "spentMinorUnits": 800,
        },
    }
    return notify(**{**arguments, **overrides})
