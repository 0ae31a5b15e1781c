"""Persona fixtures (an admin, a lead, a reviewer and a viewer in tenant A; a reviewer in
tenant B), API clients, and the PostgreSQL / browser markers."""

import os
from pathlib import Path

import pytest
from django.db import connection

from approvals.services.rules import rules_cache_clear
from console.core import adb, ratelimit
from tests.loopback_only import sitecustomize as loopback_only
from tests.support import workers
from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, TenantFactory, make_key


def pytest_configure(config):
    """Tests send traffic only to loopback: in this process and in every Python process a
    test starts (tests/loopback_only/sitecustomize.py)."""
    folder = str(Path(__file__).parent / "loopback_only")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (folder, os.environ.get("PYTHONPATH", "")) if p
    )
    loopback_only.install()
    _fast_password_hasher()
    _redis_prefix_of_this_worker()
    _roomier_pool_in_this_process()
    _smaller_pools_in_the_servers_it_starts()
    _seal_at_commit_in_this_process()


def _fast_password_hasher():
    """PBKDF2 with one round instead of 1,000,000: every persona fixture and sign-in hashes a
    password. The hash names its round count, so the live servers the tests start (other
    processes, with the real hashers) verify it too; the others stay listed, so a stored hash of
    any kind still verifies."""
    from django.conf import global_settings, settings
    from django.contrib.auth import hashers

    settings.PASSWORD_HASHERS = [
        "tests.support.hashers.OneRoundPBKDF2PasswordHasher",
        *global_settings.PASSWORD_HASHERS,
    ]
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()


def _seal_at_commit_in_this_process():
    """This process seals audit entries right after their commit, as on SQLite: a test reads
    its entries sealed when its action returns. The Sealer's delay (the servers' default,
    which the live servers the tests start keep) has its own tests
    (tests/console/audit/test_sealer.py)."""
    from django.conf import settings

    settings.GAVEL_AUDIT_SEAL_DELAY_MS = 0


def _roomier_pool_in_this_process():
    """The test process's PostgreSQL pool may count up to 200 connections (the servers it
    starts keep DB_POOL_MAX). The socket tests run each test on an event loop of its own, and
    an executor thread of a closed loop can end with a connection still checked out:
    PostgreSQL closes it (the backends stay at a handful), but the pool keeps counting it,
    about one a test. At the default cap of 20 the consumers of the tests that came late in a
    whole run waited for a connection until PoolTimeout (CI: tests/security/test_live.py's
    H1 tests, three runs in a row). A server process runs one loop for its life: no such
    leak there."""
    from django.conf import settings

    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):
        pool["max_size"] = max(pool.get("max_size", 0), 200)
        # A burst (the race tests' fifty deciding threads) opens as many connections; psycopg's
        # pool closes one it did not need each `max_idle` seconds (10 minutes by default), so
        # they stayed open for the rest of the run: ~50 of PostgreSQL's 100 per test process.
        pool["max_idle"] = 2


def _smaller_pools_in_the_servers_it_starts():
    """The daphnes, workers and sweeps the tests start keep at most 8 pooled connections each
    (DB_POOL_MAX; the servers' default is 20) unless the environment says otherwise: two
    pytest-xdist workers, each with its live servers, then stay inside PostgreSQL's default
    100 connections (CI runs PostgreSQL on two workers; a peak of 78 measured with this)."""
    os.environ.setdefault("DB_POOL_MAX", "8")


def _redis_prefix_of_this_worker():
    """Under pytest-xdist, each worker's channel layer, rate limits and the consoles it starts
    keep to a Redis prefix of their own (REDIS_PREFIX-gw1), so one worker's group messages
    never reach another's consumers."""
    from django.conf import settings

    suffix = workers.worker_suffix()
    if not suffix:
        return
    prefix = f"{os.environ.get('REDIS_PREFIX', '').strip() or 'gavel'}{suffix}"
    os.environ["REDIS_PREFIX"] = prefix
    settings.REDIS_PREFIX = prefix
    config = settings.CHANNEL_LAYERS["default"].get("CONFIG")
    if config is not None and "prefix" in config:
        config["prefix"] = prefix


def pytest_collection_modifyitems(config, items):
    _long_modules_first(items)
    _postgres_only(items)


def _long_modules_first(items):
    """Under pytest-xdist (`--dist loadfile` hands modules out in collection order), the outage
    drills (the socket churn alone is minutes) and the browser tests go first: a run otherwise
    ended with one worker on them while the other had nothing left. Stable: each module's own
    order, and every worker's collection, stay the same."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    first = ("outage", "browser")

    def weight(item):
        return next((n for n, name in enumerate(first) if item.get_closest_marker(name)), 2)

    items.sort(key=weight)


def _postgres_only(items):
    from django.conf import settings

    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    require = os.environ.get("GAVEL_REQUIRE_POSTGRES") == "1"
    for item in items:
        if item.get_closest_marker("postgres") and not on_postgres:
            if require:
                item.add_marker(pytest.mark.xfail(reason="PostgreSQL required", strict=True))
            else:
                item.add_marker(
                    pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://...")
                )


@pytest.fixture(scope="session", autouse=True)
def _no_session_left_on_the_test_database(django_db_setup, django_db_blocker):
    """At the end, before the test database is dropped: with pooled connections, one still
    checked out by some worker thread of the test process (a thread-sensitive executor, a
    consumer's) keeps its session, and PostgreSQL refuses to drop a database in use."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock():
        connection.close_pool()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        connection.close()


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    """Every test starts with full buckets and no kept API key copies (a rolled-back test
    database hands key ids out again)."""
    from console.directory import keycopies

    ratelimit.reset()
    keycopies.forget_all()
    yield


@pytest.fixture(autouse=True)
def _async_reads_see_what_the_test_wrote(request, settings):
    """console/adb.py reads on connections of its own, which see only committed rows: a test
    whose writes stay in its rolled-back transaction reads through the ORM (the fallback);
    a transactional test (`django_db(transaction=True)`) takes the async path, as a server
    does. Its idle connections end with the test's loop (a kept session would block the next
    test's flush or the database's drop)."""
    marker = request.node.get_closest_marker("django_db")
    committed = "transactional_db" in request.fixturenames or bool(
        marker and (marker.kwargs.get("transaction") or (marker.args and marker.args[0]))
    )
    if not committed:
        settings.GAVEL_ASYNC_READS = False
    yield
    adb.discard_all()


@pytest.fixture(autouse=True)
def _fresh_compiled_rules():
    """Each process caches compiled rules by tenant id and rules version; a rolled-back test
    database hands both out again, so every test starts with none."""
    rules_cache_clear()
    yield


@pytest.fixture(scope="module")
def issuer():
    """A real OpenID provider (tests/support/oidc_provider.py), one per test module: its
    issuer URL."""
    from tests.support.oidc_provider import running_provider

    with running_provider() as url:
        yield url


@pytest.fixture
def http_issuers_allowed():
    """The tests' provider is served over http://127.0.0.1 (a real one must be https)."""
    from django.test import override_settings

    with override_settings(GAVEL_OIDC_ALLOW_HTTP=True):
        yield


@pytest.fixture
def on_postgres():
    return connection.vendor == "postgresql"


@pytest.fixture
def tenant_a(db):
    return TenantFactory(slug="tenant-a", name="Tenant A")


@pytest.fixture
def tenant_b(db):
    return TenantFactory(slug="tenant-b", name="Tenant B")


@pytest.fixture
def admin_a(tenant_a):
    return PrincipalFactory(
        tenant=tenant_a, external_id="admin@a.example", role="admin", password="admin-pass-123"
    )


@pytest.fixture
def lead_a(tenant_a):
    return PrincipalFactory(
        tenant=tenant_a, external_id="lead@a.example", role="lead", password="lead-pass-123"
    )


@pytest.fixture
def reviewer_a(tenant_a):
    return PrincipalFactory(
        tenant=tenant_a,
        external_id="reviewer@a.example",
        role="reviewer",
        password="reviewer-pass-123",
    )


@pytest.fixture
def viewer_a(tenant_a):
    return PrincipalFactory(
        tenant=tenant_a, external_id="viewer@a.example", role="viewer", password="viewer-pass-123"
    )


@pytest.fixture
def reviewer_b(tenant_b):
    return PrincipalFactory(
        tenant=tenant_b,
        external_id="reviewer@b.example",
        role="reviewer",
        password="reviewer-pass-123",
    )


@pytest.fixture
def ingest_a(client, tenant_a):
    return ApiClient(client, make_key(tenant_a, scopes=("ingest",)))


@pytest.fixture
def ingest_b(client, tenant_b):
    return ApiClient(client, make_key(tenant_b, scopes=("ingest",)))


@pytest.fixture
def rules_a(client, tenant_a, lead_a):
    """A `manage` key of a lead (whose role has manage_rules) in tenant A."""
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))


@pytest.fixture
def decide_a(client, tenant_a, reviewer_a):
    return ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
