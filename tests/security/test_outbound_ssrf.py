"""M1: webhook URLs, the OIDC issuer (and the endpoints its document names) and Slack's
response_url may not reach loopback, private, link-local, unspecified or otherwise internal
addresses: refused when saved, and again when a request connects (a name is resolved once,
each of its addresses checked, and the connection made to the checked address). Errors are
generic. No test sends a packet off loopback: names resolve through a stub of
`socket.getaddrinfo`, and `socket.connect` fails the test when it is reached."""

from __future__ import annotations

import contextlib
import ipaddress
import socket

import pytest
from django.core.management import CommandError, call_command

from approvals.models import DeliveryStatus, Webhook, WebhookDelivery
from approvals.services import webhooks
from console.directory import oidc
from console.models import TenantOidc
from notifications.models import SlackResponse
from notifications.slack_responses import slack_response_enqueue, slack_responses_run_due
from tests.support.api import ApiClient
from tests.support.endpoints import Endpoint
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db

INTERNAL = [
    "https://127.0.0.1:5432/",
    "https://[::1]:5432/",
    "https://0.0.0.0:5432/",
    "https://2130706433:5432/",
    "https://0x7f000001:5432/",
    "https://0177.0.0.1/",
    "https://127.1:6391/",
    "https://localhost:18602/",
    "https://api.localhost/",
    "https://user:pw@127.0.0.1:6391/",
    "https://user:pw@hooks.example/",
    "https://169.254.169.254/latest/meta-data/",
    "https://10.255.255.1/",
    "https://192.168.1.1/",
    "https://172.16.0.1/",
    "https://100.64.0.1/",
    "https://224.0.0.1/",
    "https://[fe80::1]/",
    "https://[fd00::1]/",
    "https://[::]/",
    "https://[::ffff:127.0.0.1]/",
    "https://[::ffff:a00:1]/",
    "https://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "https://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
    "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",  # Teredo
]


@pytest.fixture
def connects(monkeypatch):
    """Every socket connection attempted (each refused at once, nothing leaves)."""
    made: list = []

    def refuse(sock, address):
        made.append(address)
        raise ConnectionRefusedError("the test forbids connecting")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return made


@pytest.fixture
def resolves(monkeypatch):
    """Names resolve to what the test says (`resolves["hooks.example"] = ["10.0.0.1"]`)."""
    table: dict[str, list[str]] = {}
    asked: list[str] = []

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        asked.append(host)
        with contextlib.suppress(ValueError):  # a number is its own address, as for real
            table.setdefault(host, [str(ipaddress.ip_address(host))])
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "not in the test's table")
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port or 443, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port or 443))
            for a in table[host]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    table["__asked__"] = asked  # type: ignore[assignment]
    return table


@pytest.fixture
def manage_admin(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


@pytest.mark.parametrize("url", INTERNAL)
def test_m1_an_internal_webhook_url_is_refused_when_saved(manage_admin, connects, url):
    response = manage_admin.post("/api/v1/webhooks", {"url": url, "events": ["approval.decided"]})
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error" and error["details"][0]["path"] == "url"
    message = error["details"][0]["message"]
    assert "internal address" in message or "user name or password" in message
    assert url not in message  # generic: the URL is not echoed
    assert not Webhook.objects.exists() and connects == []


@pytest.mark.parametrize(
    "url", ["https://10.0.0.1/", "https://localhost/", "https://[::ffff:169.254.169.254]/"]
)
def test_m1_the_create_webhook_command_refuses_internal_urls(tenant_a, connects, url):
    with pytest.raises(CommandError, match="internal address"):
        call_command("create_webhook", "--tenant", "tenant-a", "--url", url)
    assert not Webhook.objects.exists() and connects == []


def test_m1_loopback_only_with_a_development_flag_and_private_ranges_never(
    manage_admin, settings, connects
):
    for flag in ("GAVEL_OUTBOUND_ALLOW_LOOPBACK", "GAVEL_WEBHOOK_ALLOW_HTTP"):
        setattr(settings, flag, True)
        for url in ("https://127.0.0.1:8443/", "https://[::1]/", "https://localhost:9/"):
            body = {"url": url, "events": ["approval.decided"]}
            assert manage_admin.post("/api/v1/webhooks", body).status_code == 201
        for url in ("https://10.0.0.1/", "https://0.0.0.0/", "https://169.254.169.254/"):
            body = {"url": url, "events": ["approval.decided"]}
            assert manage_admin.post("/api/v1/webhooks", body).status_code == 422
        setattr(settings, flag, False)
    assert connects == []


@pytest.mark.parametrize(
    "addresses",
    [
        ["127.0.0.1"],
        ["10.0.0.7"],
        ["169.254.169.254"],
        ["0.0.0.0"],  # noqa: S104 - an address refused, not bound
        ["::1"],
        ["::ffff:192.168.0.1"],
        ["93.184.216.34", "10.0.0.1"],  # one bad address is enough
    ],
)
def test_m1_a_name_resolving_to_an_internal_address_is_refused_before_connecting(
    tenant_a, resolves, connects, addresses
):
    """A name is not resolved when saved; when a delivery connects (every attempt: DNS
    rebinding) each address is checked and none is connected to."""
    webhook, _ = webhooks.webhook_create(tenant=tenant_a, url="https://hooks.example/gavel")
    resolves["hooks.example"] = addresses
    webhooks.webhook_test_send(webhook=webhook)
    assert webhooks.webhook_deliveries_run_due() == 1
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert delivery.last_error == "destination not allowed"
    assert connects == []


def test_m1_a_slack_response_url_resolving_internally_is_not_posted(tenant_a, resolves, connects):
    resolves["hooks.slack.com"] = ["10.1.2.3"]
    row = slack_response_enqueue(
        tenant_id=tenant_a.pk, url="https://hooks.slack.com/actions/T1/2/x", body={"text": "x"}
    )
    assert slack_responses_run_due() == 1
    row = SlackResponse.objects.get(pk=row.pk)
    assert row.attempts == 1 and row.last_error == "destination not allowed"
    assert connects == []


@pytest.mark.parametrize(
    "issuer",
    ["https://169.254.169.254/", "https://127.0.0.1:5432/", "https://localhost/", "https://[::1]/"],
)
def test_m1_an_internal_oidc_issuer_is_refused_without_a_request(
    manage_admin, tenant_a, connects, issuer
):
    body = {"issuer": issuer, "clientId": "x", "clientSecret": "s3cret-s3cret"}
    response = manage_admin.patch("/api/v1/tenant/oidc", body)
    assert response.status_code == 422, response.content
    detail = response.json()["error"]["details"][0]
    assert detail["path"] == "issuer" and "internal address" in detail["message"]
    assert not TenantOidc.objects.filter(tenant=tenant_a).exists() and connects == []


def test_m1_internal_endpoints_named_by_an_issuers_document_are_never_called(connects):
    """A provider's document may name any jwks_uri or token_endpoint: each is checked when
    it is called."""
    with pytest.raises(oidc.OidcError) as jwks:
        oidc.jwks({"jwks_uri": "https://10.0.0.1/keys"})
    assert "destination not allowed" in jwks.value.message
    with pytest.raises(oidc.OidcError) as token:
        oidc.exchange_code(
            {"token_endpoint": "https://127.0.0.1:5432/token"},
            client_id="x", client_secret="y", redirect_uri="https://g.example/cb",
            code="c", verifier="v" * 43,
        )  # fmt: skip
    assert token.value.reason == "token_refused"
    assert "destination not allowed" in token.value.message
    assert connects == []


@pytest.fixture
def loopback(settings):
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True  # development: loopback endpoints allowed
    endpoint = Endpoint("ok")
    yield endpoint
    endpoint.close()


def test_m1_delivery_errors_are_generic_and_name_no_port_state(tenant_a, loopback):
    """A closed port and an open port that speaks no TLS: no errno, no TLS alert, no
    exception text for whoever reads the deliveries (no port scanner)."""
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    closed = spare.getsockname()[1]
    spare.close()
    open_port = loopback.server.server_address[1]
    for url in (f"https://127.0.0.1:{closed}/", f"https://127.0.0.1:{open_port}/"):
        webhook, _ = webhooks.webhook_create(tenant=tenant_a, url=url)
        webhooks.webhook_test_send(webhook=webhook)
    webhooks.webhook_deliveries_run_due()
    errors = {d.webhook.url: d.last_error for d in WebhookDelivery.objects.all()}
    assert errors == {
        f"https://127.0.0.1:{closed}/": "connection failed",
        f"https://127.0.0.1:{open_port}/": "TLS error",
    }


def test_a_checked_address_is_connected_to_under_the_urls_name(tenant_a, loopback, resolves):
    """The connection goes to the address that was checked, and the request still names its
    host (Host header; SNI for https)."""
    port = loopback.server.server_address[1]
    resolves["hooks.example"] = ["127.0.0.1"]
    webhook, _ = webhooks.webhook_create(tenant=tenant_a, url=f"http://hooks.example:{port}/h")
    webhooks.webhook_test_send(webhook=webhook)
    assert webhooks.webhook_deliveries_run_due() == 1
    assert WebhookDelivery.objects.get().status == DeliveryStatus.DELIVERED
    assert resolves["__asked__"].count("hooks.example") == 1  # the name, resolved once
    assert loopback.hosts == [f"hooks.example:{port}"]
