"""A process's copies of the API keys it authenticated (console/directory/keycopies.py): with
Redis, a key's next request reads no key row, and every change that can change its answer —
revoked, expired, its principal deactivated, its scopes or rate, its tenant — applies at the
next request, on this process and (through the keys epoch) on every other; without Redis, or
with GAVEL_KEY_COPY_SECONDS=0, every request reads its key as before."""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.core import ratelimit
from console.models import ApiKey
from tests.support.api import ApiClient
from tests.support.factories import make_key

REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="needs Redis (REDIS_URL): the epoch")
pytestmark = pytest.mark.django_db


@pytest.fixture
def shared(settings):
    """Redis under a prefix of this test's own (its keys removed afterwards)."""
    prefix = f"{os.environ.get('REDIS_PREFIX', 'gavel')}-kc-{uuid.uuid4().hex[:8]}"
    settings.REDIS_URL, settings.REDIS_PREFIX = REDIS_URL, prefix
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    client.close()


def key_reads(api, path="/api/v1/runs") -> tuple[int, int]:
    """(status, how many statements read the api key table) of one request."""
    with CaptureQueriesContext(connection) as seen:
        status = api.get(path).status_code
    return status, sum('FROM "console_apikey"' in q["sql"] for q in seen.captured_queries)


def other_process_moves_the_epoch() -> None:
    """What a change committed on another server process does to this one: the epoch moves."""
    ratelimit.limiter().bump_epoch()


@needs_redis
def test_a_keys_next_request_reads_no_key_row(client, tenant_a, shared):
    api = ApiClient(client, make_key(tenant_a))
    assert key_reads(api) == (200, 1)
    assert key_reads(api) == (200, 0)
    assert key_reads(api) == (200, 0)


@needs_redis
def test_a_key_revoked_on_another_process_is_401_at_its_next_request(client, tenant_a, shared):
    api = ApiClient(client, make_key(tenant_a))
    assert key_reads(api) == (200, 1)
    ApiKey.objects.update(revoked_at=timezone.now())  # another process's write: no signal here
    other_process_moves_the_epoch()  # ...and its commit moved the epoch
    assert key_reads(api) == (401, 1)


@needs_redis
def test_a_key_revoked_through_this_process_is_401_at_its_next_request(
    client, tenant_a, admin_a, shared
):
    api = ApiClient(client, make_key(tenant_a))
    assert api.get("/api/v1/runs").status_code == 200
    from console.directory.services.keys import api_key_revoke

    api_key_revoke(key=ApiKey.objects.get(), viewer=admin_a)
    assert key_reads(api) == (401, 1)


@needs_redis
def test_the_epoch_moves_when_the_change_commits_not_before(tenant_a, shared):
    from django.db import transaction
    from django.test import TestCase

    make_key(tenant_a)
    key, limiter = ApiKey.objects.get(), ratelimit.limiter()
    before = limiter.epoch()
    with TestCase.captureOnCommitCallbacks(execute=True):
        with transaction.atomic():
            key.scopes = ["ingest", "decide"]
            key.save(update_fields=["scopes"])
        assert limiter.epoch() == before  # not committed yet: no other process may read it
    assert limiter.epoch() == before + 1  # committed (the callbacks a commit runs)


@needs_redis
def test_a_principal_deactivated_and_a_scope_removed_apply_at_the_next_request(
    client, tenant_a, admin_a, shared
):
    raw = make_key(tenant_a, scopes=("decide",), principal=admin_a)
    api = ApiClient(client, raw)
    assert key_reads(api, "/api/v1/approvals") == (200, 1)
    assert key_reads(api, "/api/v1/approvals") == (200, 0)
    ApiKey.objects.update(scopes=["ingest"])
    other_process_moves_the_epoch()
    assert key_reads(api, "/api/v1/approvals") == (403, 1)
    ApiKey.objects.update(scopes=["decide"])
    admin_a.is_active = False
    admin_a.save(update_fields=["is_active"])  # through this process: its copies go at once
    assert key_reads(api, "/api/v1/approvals") == (401, 1)


@needs_redis
def test_a_kept_key_past_its_expiry_is_401_with_no_epoch_move(client, tenant_a, shared):
    api = ApiClient(client, make_key(tenant_a))
    ApiKey.objects.update(expires_at=timezone.now() + timedelta(seconds=1))
    assert key_reads(api) == (200, 1)
    assert key_reads(api) == (200, 0)
    time.sleep(1.1)
    assert api.get("/api/v1/runs").status_code == 401


@needs_redis
def test_a_copy_lives_at_most_its_seconds_when_the_epoch_did_not_move(
    client, tenant_a, shared, settings
):
    """A change whose epoch move was lost (Redis refused it at that commit) is seen within
    GAVEL_KEY_COPY_SECONDS all the same."""
    settings.GAVEL_KEY_COPY_SECONDS = 1
    api = ApiClient(client, make_key(tenant_a))
    assert key_reads(api) == (200, 1)
    ApiKey.objects.update(revoked_at=timezone.now())  # and no epoch move
    assert key_reads(api) == (200, 0)  # the copy, within its second
    time.sleep(1.05)
    assert key_reads(api) == (401, 1)


@needs_redis
def test_each_request_takes_one_token_from_a_copy_or_after_the_epoch_moved(
    client, tenant_a, shared
):
    api = ApiClient(client, make_key(tenant_a))
    ApiKey.objects.update(rate_per_minute=1, rate_burst=4)
    assert api.get("/api/v1/runs").status_code == 200  # read, then one token
    assert api.get("/api/v1/runs").status_code == 200  # the copy: one token
    other_process_moves_the_epoch()
    assert api.get("/api/v1/runs").status_code == 200  # the copy's token, then read: no second
    assert api.get("/api/v1/runs").status_code == 200
    refused = api.get("/api/v1/runs")
    assert refused.status_code == 429


@needs_redis
def test_a_request_gets_its_own_copy_of_the_rows(tenant_a, admin_a, shared, rf):
    from console.web.auth import KeyAuth

    raw = make_key(tenant_a, scopes=("decide",), principal=admin_a)
    auth = KeyAuth("decide")
    first = auth.authenticate(rf.get("/"), raw)
    first.principal._gavel_roles = []  # what a request may leave on its rows
    first.tenant.name = "changed in one request"
    second = auth.authenticate(rf.get("/"), raw)
    assert second is not first and second.principal is not first.principal
    assert not hasattr(second.principal, "_gavel_roles")
    assert second.tenant.name == tenant_a.name


def test_without_redis_every_request_reads_its_key(client, tenant_a, settings):
    settings.REDIS_URL = ""
    api = ApiClient(client, make_key(tenant_a))
    assert [key_reads(api) for _ in range(3)] == [(200, 1)] * 3


@needs_redis
def test_no_copies_with_zero_seconds(client, tenant_a, shared, settings):
    settings.GAVEL_KEY_COPY_SECONDS = 0
    api = ApiClient(client, make_key(tenant_a))
    assert [key_reads(api) for _ in range(3)] == [(200, 1)] * 3


@needs_redis
def test_a_tenant_changed_by_an_update_moves_the_epoch_too(tenant_a, shared):
    from django.test import TestCase

    from console.directory.services import tenant_create

    before = ratelimit.limiter().epoch()
    with TestCase.captureOnCommitCallbacks(execute=True):
        tenant_create(slug=tenant_a.slug, name="Renamed")  # an UPDATE: no post_save
    assert ratelimit.limiter().epoch() > before
