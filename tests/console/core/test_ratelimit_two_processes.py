"""Two real daphnes behind one "load balancer" (requests alternate between them): with Redis a
key gets its burst once across both; the same two processes without Redis (the same run's
baseline) give it twice. The refused requests are the contract's 429: `Retry-After` in whole
seconds and the JSON error body."""

from __future__ import annotations

import os
import uuid
from contextlib import ExitStack

import httpx
import pytest
import redis

from tests.support.daphne import daphne
from tests.support.live_console import last_line, live_env, manage

BURST = 10
TENANT = "rl-live"


def _answers(urls: list[str], key: str, n: int) -> list[httpx.Response]:
    auth = {"Authorization": f"Bearer {key}"}
    clients = [httpx.Client(base_url=url, headers=auth) for url in urls]
    try:
        return [clients[i % len(clients)].get("/api/v1/runs") for i in range(n)]
    finally:
        for client in clients:
            client.close()


def test_two_daphnes_sharing_redis_give_a_key_its_burst_once(tmp_path):
    if not os.environ.get("REDIS_URL"):
        pytest.skip("needs Redis (REDIS_URL): the processes share the buckets through it")
    env = live_env(tmp_path, "ratelimit2p")
    env["GAVEL_DEFAULT_RATE_PER_MINUTE"] = "1"  # no refill during the test
    env["GAVEL_DEFAULT_RATE_BURST"] = str(BURST)
    manage(env, "migrate", "--verbosity", "0")
    manage(env, "create_tenant", TENANT)
    key = last_line(manage(env, "create_api_key", "--tenant", TENANT, "--name", "runtime"))
    shared = {
        **env,
        "REDIS_URL": os.environ["REDIS_URL"],
        "REDIS_PREFIX": f"{os.environ.get('REDIS_PREFIX', 'gavel')}-rl2p-{uuid.uuid4().hex[:8]}",
    }
    try:
        with ExitStack() as stack:
            urls = [stack.enter_context(daphne(shared, tmp_path / f"{n}.log")) for n in (1, 2)]
            answers = _answers(urls, key, 3 * BURST)
        statuses = [a.status_code for a in answers]
        assert statuses.count(200) == BURST, statuses
        assert statuses.count(429) == 2 * BURST, statuses
        assert {a.url.port for a in answers if a.status_code == 200} == {
            httpx.URL(u).port for u in urls
        }  # both processes admitted some, and together no more than the burst
        for refused in (a for a in answers if a.status_code == 429):
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            assert refused.json() == {
                "error": {
                    "code": "rate_limited",
                    "message": "rate limit exceeded for this key",
                    "details": None,
                }
            }

        # The same run's baseline: the same two processes without Redis, each its own bucket.
        with ExitStack() as stack:
            urls = [stack.enter_context(daphne(env, tmp_path / f"{n}b.log")) for n in (1, 2)]
            baseline = [a.status_code for a in _answers(urls, key, 3 * BURST)]
        assert baseline.count(200) == 2 * BURST, baseline
    finally:
        client = redis.Redis.from_url(os.environ["REDIS_URL"])
        for name in client.scan_iter(match=f"{shared['REDIS_PREFIX']}:*"):
            client.delete(name)
        client.close()
