"""GAVEL_TRUSTED_PROXY_CIDRS: X-Forwarded-For is believed only from the load balancers'
addresses, so a client that reaches a server directly cannot put a forged address into the
audit log or the sign-in lockout (OPS_AUDIT §1 row 6: 6.6.6.6)."""

import ipaddress

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from console.core import request as signin
from console.models import AuditEvent
from console.settings import env_cidrs
from tests.support.api import ApiClient
from tests.support.factories import make_key

LB = [ipaddress.ip_network("10.0.0.0/24"), ipaddress.ip_network("fd00::/8")]


def address(remote, forwarded=None):
    meta = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    return signin.client_address(RequestFactory().get("/", **meta))


@pytest.mark.parametrize(
    ("remote", "forwarded", "client"),
    [
        ("203.0.113.5", "6.6.6.6", "203.0.113.5"),  # straight to the server: XFF ignored
        ("10.0.0.7", "198.51.100.9", "198.51.100.9"),  # through the balancer
        ("10.0.0.7", "6.6.6.6, 198.51.100.9", "198.51.100.9"),  # a forged hop left of it
        ("10.0.0.7", "198.51.100.9, 10.0.0.3", "198.51.100.9"),  # two trusted hops
        ("10.0.0.7", "", "10.0.0.7"),  # the balancer itself
        ("10.0.0.7", "10.0.0.3, not-an-ip", "10.0.0.7"),  # garbage stops the walk
        ("fd00::1", "2001:db8::9", "2001:db8::9"),  # IPv6 balancers
        ("::ffff:10.0.0.7", "198.51.100.9", "198.51.100.9"),  # a mapped IPv4 peer
    ],
)
def test_the_client_is_the_rightmost_address_outside_the_trusted_networks(
    settings, remote, forwarded, client
):
    settings.GAVEL_TRUSTED_PROXY_CIDRS = tuple(LB)
    settings.GAVEL_TRUSTED_PROXIES = 1  # the networks replace the count
    assert address(remote, forwarded) == client


def test_without_networks_the_count_still_applies(settings):
    settings.GAVEL_TRUSTED_PROXY_CIDRS = ()
    settings.GAVEL_TRUSTED_PROXIES = 1
    assert address("203.0.113.5", "6.6.6.6") == "6.6.6.6"  # the old, spoofable behaviour


def test_bad_networks_stop_start_up(monkeypatch):
    monkeypatch.setenv("GAVEL_TRUSTED_PROXY_CIDRS", "10.0.0.0/8, nope")
    with pytest.raises(ImproperlyConfigured, match="'nope' is not an IP network"):
        env_cidrs("GAVEL_TRUSTED_PROXY_CIDRS")
    monkeypatch.setenv("GAVEL_TRUSTED_PROXY_CIDRS", "10.0.0.0/8,127.0.0.1")
    assert [str(n) for n in env_cidrs("GAVEL_TRUSTED_PROXY_CIDRS")] == [
        "10.0.0.0/8",
        "127.0.0.1/32",
    ]


@pytest.mark.django_db
def test_a_forged_address_sent_straight_to_a_server_is_not_audited(
    settings, client, tenant_a, admin_a
):
    settings.GAVEL_TRUSTED_PROXY_CIDRS = tuple(LB)
    api = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))
    direct = api.patch(
        "/api/v1/retention",
        {"runDays": 5},
        headers={"X-Forwarded-For": "6.6.6.6"},  # from 127.0.0.1: not a balancer
    )
    assert direct.status_code == 200
    entry = AuditEvent.objects.filter(action="retention.updated").get()
    assert entry.ip == "127.0.0.1"
    via_lb = client.patch(
        "/api/v1/retention",
        '{"runDays": 6}',
        content_type="application/json",
        headers={
            "Authorization": api._headers(None)["Authorization"],
            "X-Forwarded-For": "198.51.100.9",
        },
        REMOTE_ADDR="10.0.0.7",
    )
    assert via_lb.status_code == 200
    newest = AuditEvent.objects.filter(action="retention.updated").order_by("-pk").first()
    assert newest.ip == "198.51.100.9"
