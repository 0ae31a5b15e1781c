"""The sign-in lockout: 5 failures per account or 20 per address within 15 minutes lock that
account or address for 15 minutes (429, when to retry, the right password refused too); each
attempt audited. Time moves through console.signin's clock seam, never by sleeping."""

import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from console.directory import signin
from console.models import AuditEvent, SigninThrottle
from tests.support.factories import PrincipalFactory

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 14, 17, 20, tzinfo=UTC)


class Clock:
    def __init__(self, at: datetime):
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, **delta) -> None:
        self.at += timedelta(**delta)


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    """Dozens of password checks per test: a fast hasher (the lockout does not care which)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(START)
    monkeypatch.setattr(signin, "now", clock)
    return clock


def sign_in(client, username, password, address="10.0.0.1", path="/accounts/login/"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def audits(action, **filters):
    return list(AuditEvent.objects.filter(action=action, **filters).order_by("pk"))


def test_five_failures_lock_the_account_and_the_right_password_is_refused(
    client, clock, reviewer_a
):
    for _ in range(5):
        response = sign_in(client, "reviewer@a.example", "wrong")
        assert response.status_code == 200
        assert "did not match" in response.content.decode()
        clock.advance(seconds=10)
    response = sign_in(client, "reviewer@a.example", "reviewer-pass-123")
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    html = response.content.decode()
    # Locked at the 5th failure (14:17:20 + 40 s) for 15 minutes: until 14:33:00.
    assert "Try again after" in html and "14:33 UTC" in html
    assert '<time datetime="2026-03-02T14:33:00Z">' in html
    assert int(response["Retry-After"]) == 15 * 60 - 10
    assert 'name="password"' not in html  # no form to keep guessing in

    failed = audits("signin.failed", tenant=reviewer_a.tenant)
    assert [e.data["reason"] for e in failed] == ["wrong_password"] * 5 + ["locked_out"]
    assert all(e.data["username"] == "reviewer@a.example" for e in failed)
    assert all(e.data["address"] == "10.0.0.1" for e in failed)
    assert all(e.object_id == "reviewer@a.example" and e.actor_principal is None for e in failed)
    assert "lockedUntil" in failed[4].data and "lockedUntil" not in failed[3].data
    assert audits("signin.succeeded") == []


def test_after_the_lockout_the_right_password_works_and_is_audited(client, clock, reviewer_a):
    for _ in range(5):
        sign_in(client, "reviewer@a.example", "wrong")
    clock.advance(minutes=14, seconds=59)
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 429
    clock.advance(seconds=1)
    response = sign_in(client, "reviewer@a.example", "reviewer-pass-123")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(reviewer_a.user_id)
    (ok,) = audits("signin.succeeded")
    assert ok.tenant_id == reviewer_a.tenant_id and ok.actor_principal_id == reviewer_a.pk
    assert ok.data["username"] == "reviewer@a.example" and ok.data["address"] == "10.0.0.1"


def test_the_account_lock_holds_from_every_address(client, clock, reviewer_a):
    for i in range(5):
        sign_in(client, "reviewer@a.example", "wrong", address=f"10.0.1.{i}")
    response = sign_in(client, "reviewer@a.example", "reviewer-pass-123", address="10.9.9.9")
    assert response.status_code == 429


def test_twenty_failures_from_one_address_lock_the_address(client, clock, reviewer_a):
    for i in range(20):  # 20 accounts, 1 failure each: no account is locked
        assert sign_in(client, f"guess{i}@a.example", "wrong").status_code == 200
    response = sign_in(client, "reviewer@a.example", "reviewer-pass-123")
    assert response.status_code == 429 and "14:33 UTC" in response.content.decode()
    # The account itself is not locked: from another address it signs in.
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123", "10.0.0.2").status_code == 302
    clock.advance(minutes=15)
    client.logout()
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 302


def test_nineteen_from_one_address_do_not_lock_it(client, clock, reviewer_a):
    for i in range(19):
        sign_in(client, f"guess{i}@a.example", "wrong")
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 302


def test_an_ipv6_address_counts_as_its_64(client, clock, reviewer_a):
    for i in range(20):
        sign_in(client, f"guess{i}", "wrong", address=f"2001:db8:1:2::{i + 1:x}")
    locked = sign_in(client, "reviewer@a.example", "reviewer-pass-123", "2001:db8:1:2::ffff")
    assert locked.status_code == 429
    other = sign_in(client, "reviewer@a.example", "reviewer-pass-123", "2001:db8:1:3::1")
    assert other.status_code == 302


def test_failures_outside_the_window_do_not_add_up(client, clock, reviewer_a):
    for _ in range(4):
        sign_in(client, "reviewer@a.example", "wrong")
    clock.advance(minutes=15)  # the window opened at the first failure is over
    for _ in range(4):
        assert sign_in(client, "reviewer@a.example", "wrong").status_code == 200
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 302


def test_a_success_forgives_the_accounts_failures(client, clock, reviewer_a):
    for _ in range(4):
        sign_in(client, "reviewer@a.example", "wrong")
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 302
    client.logout()
    for _ in range(4):
        sign_in(client, "reviewer@a.example", "wrong")
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 302


def test_a_success_does_not_clear_the_address(client, clock, reviewer_a):
    for i in range(19):
        sign_in(client, f"guess{i}", "wrong")
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 302
    client.logout()
    sign_in(client, "guess-last", "wrong")  # the 20th failure from this address
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 429


def test_refusals_while_locked_are_audited_once_a_minute(client, clock, reviewer_a):
    for _ in range(5):
        sign_in(client, "reviewer@a.example", "wrong")
    for _ in range(10):
        assert sign_in(client, "reviewer@a.example", "wrong").status_code == 429
    assert len(audits("signin.failed", data__reason="locked_out")) == 1
    clock.advance(seconds=61)
    sign_in(client, "reviewer@a.example", "wrong")
    assert len(audits("signin.failed", data__reason="locked_out")) == 2


def test_reasons_and_where_failures_are_audited(client, clock, reviewer_a, reviewer_b):
    sign_in(client, "nobody@nowhere.example", "wrong")
    assert audits("signin.failed") == []  # no tenant's login: the server log only
    reviewer_b.user.is_active = False
    reviewer_b.user.save()
    sign_in(client, "reviewer@b.example", "reviewer-pass-123")
    (inactive,) = audits("signin.failed")
    assert inactive.tenant_id == reviewer_b.tenant_id and inactive.data["reason"] == "inactive"
    assert not audits("signin.failed", tenant=reviewer_a.tenant)


def test_the_user_agent_is_kept_short(client, clock, reviewer_a):
    client.post(
        "/accounts/login/",
        {"username": "reviewer@a.example", "password": "wrong"},
        HTTP_USER_AGENT="x" * 5000,
    )
    (event,) = audits("signin.failed")
    assert event.data["userAgent"] == "x" * 256


@pytest.mark.urls("tests.security.identity_urls")  # GAVEL_DJANGO_ADMIN=1 (off by default)
def test_the_django_admin_login_is_under_the_same_lockout(client, clock, db):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("root", "root@example.com", "root-pass-123")
    for _ in range(5):
        sign_in(client, "root", "wrong", path="/django-admin/login/")
    assert sign_in(client, "root", "root-pass-123", path="/django-admin/login/").status_code == 429
    assert sign_in(client, "root", "root-pass-123").status_code == 429


def test_the_login_page_itself_is_never_locked(client, clock, reviewer_a):
    for _ in range(5):
        sign_in(client, "reviewer@a.example", "wrong")
    assert client.get("/accounts/login/").status_code == 200


# --- the client's address ---


class FakeRequest:
    def __init__(self, remote, forwarded=None):
        self.META = {"REMOTE_ADDR": remote}
        if forwarded is not None:
            self.META["HTTP_X_FORWARDED_FOR"] = forwarded


@pytest.mark.parametrize(
    "proxies, remote, forwarded, expected",
    [
        (0, "10.0.0.1", "6.6.6.6", "10.0.0.1"),  # no proxy trusted: the header is ignored
        (1, "10.0.0.1", "6.6.6.6, 203.0.113.7", "203.0.113.7"),  # the LB's entry, not a forgery
        (2, "10.0.0.1", "6.6.6.6, 203.0.113.7, 10.0.0.9", "203.0.113.7"),
        (2, "10.0.0.1", "203.0.113.7", "203.0.113.7"),  # fewer hops than proxies: the leftmost
        (1, "10.0.0.1", "", "10.0.0.1"),  # no header: REMOTE_ADDR
        (1, "10.0.0.1", "not-an-ip", "10.0.0.1"),
        (0, "::ffff:192.0.2.1", None, "192.0.2.1"),  # IPv4-mapped: the IPv4 address
    ],
)
def test_client_address(settings, proxies, remote, forwarded, expected):
    settings.GAVEL_TRUSTED_PROXIES = proxies
    assert signin.client_address(FakeRequest(remote, forwarded)) == expected


def test_a_forged_forwarded_header_does_not_dodge_the_address_limit(client, clock, reviewer_a):
    for i in range(20):
        client.post(
            "/accounts/login/",
            {"username": f"guess{i}", "password": "wrong"},
            REMOTE_ADDR="10.0.0.1",
            HTTP_X_FORWARDED_FOR=f"198.51.100.{i}",
        )
    assert sign_in(client, "reviewer@a.example", "reviewer-pass-123").status_code == 429


def test_behind_a_trusted_proxy_the_forwarded_address_is_counted(client, clock, settings, tenant_a):
    settings.GAVEL_TRUSTED_PROXIES = 1
    PrincipalFactory(tenant=tenant_a, external_id="p@a.example", password="p-pass-12345")
    for i in range(20):
        client.post(
            "/accounts/login/",
            {"username": f"guess{i}", "password": "wrong"},
            REMOTE_ADDR="10.0.0.254",  # the load balancer
            HTTP_X_FORWARDED_FOR="198.51.100.1",
        )
    blocked = client.post(
        "/accounts/login/",
        {"username": "p@a.example", "password": "p-pass-12345"},
        REMOTE_ADDR="10.0.0.254",
        HTTP_X_FORWARDED_FOR="198.51.100.1",
    )
    assert blocked.status_code == 429
    other = client.post(
        "/accounts/login/",
        {"username": "p@a.example", "password": "p-pass-12345"},
        REMOTE_ADDR="10.0.0.254",
        HTTP_X_FORWARDED_FOR="198.51.100.2",
    )
    assert other.status_code == 302
    (event,) = AuditEvent.objects.filter(action="signin.succeeded")
    assert event.data["address"] == "198.51.100.2"


# --- the table ---


def test_attempts_in_flight_count_before_their_password_is_checked(clock, db):
    """Six attempts begun before any finishes: the sixth is refused (no password checked)."""
    attempts = [signin.attempt_begin(username="alice", address=None) for _ in range(6)]
    assert [a.locked_until is None for a in attempts] == [True] * 5 + [False]
    assert attempts[5].locked_until == START + timedelta(minutes=15)


def test_finished_rows_are_purged(clock, db, monkeypatch):
    signin.attempt_failed(signin.attempt_begin(username="alice", address="10.0.0.1"))
    assert SigninThrottle.objects.count() == 2
    clock.advance(minutes=16)
    monkeypatch.setattr(signin, "_last_purge", 0.0)
    signin.attempt_begin(username="bob", address=None)
    assert list(SigninThrottle.objects.values_list("scope", flat=True)) == ["account"]


def test_keys_are_digests_not_the_names_tried(clock, db):
    signin.attempt_begin(username="alice@example.com", address="10.0.0.1")
    keys = list(SigninThrottle.objects.values_list("key", flat=True))
    assert all(re.fullmatch("[0-9a-f]{64}", key) for key in keys)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_guesses_are_counted_once_each(clock, tenant_a, request):
    """Twelve guesses at once, each in its own connection: exactly five get their password
    checked; the others are refused, and the account is locked afterwards."""
    if connection.settings_dict["OPTIONS"].get("pool"):
        pool = connection.pool
        request.addfinalizer(lambda sizes=(pool.min_size, pool.max_size): pool.resize(*sizes))
        pool.resize(min_size=pool.min_size, max_size=pool.max_size + 12)
    barrier = threading.Barrier(12, timeout=60)
    results = [None] * 12

    def guess(i):
        try:
            barrier.wait()
            results[i] = signin.attempt_begin(username="alice", address=f"10.1.0.{i}")
        finally:
            connection.close()

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.locked_until is None for r in results) == 5
    row = SigninThrottle.objects.get(scope="account")
    assert row.failures == 12 and row.locked_until == START + timedelta(minutes=15)
