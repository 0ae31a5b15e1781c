"""ops.middleware's per-request work: request ids made from a per-process prefix and a count,
and the Prometheus children made once per (method, route pattern, status class), never per
request, with the labels the contract names."""

from __future__ import annotations

import os
import re

import pytest
from prometheus_client import REGISTRY

from ops import instruments, middleware
from ops.context import accept_request_id, new_request_id

pytestmark = pytest.mark.django_db

REQUEST_ID = re.compile(r"req_[0-9a-f]{32}")


def _count(method: str, route: str, status: str) -> float:
    value = REGISTRY.get_sample_value(
        "gavel_http_requests_total", {"method": method, "route": route, "status": status}
    )
    return value or 0.0


def test_new_request_ids_are_distinct_and_keep_the_old_form():
    ids = [new_request_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(REQUEST_ID.fullmatch(i) for i in ids)
    assert accept_request_id(None) != accept_request_id(None)
    assert accept_request_id("lb-1.a") == "lb-1.a"


def test_a_forked_process_draws_its_own_prefix():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, written back, then gone at once
        try:
            os.write(write, new_request_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    ours = new_request_id()
    assert REQUEST_ID.fullmatch(child)
    assert child[:20] != ours[:20]  # "req_" and 16 hex digits of prefix


def test_children_are_made_once_per_route_method_and_status_class(client, monkeypatch):
    made = []
    labels = instruments.HTTP_REQUESTS.labels

    def counting(*values):
        made.append(values)
        return labels(*values)

    monkeypatch.setattr(instruments.HTTP_REQUESTS, "labels", counting)
    monkeypatch.setattr(middleware, "_children", {})
    before = _count("GET", "/healthz", "2xx")
    for _ in range(5):
        assert client.get("/healthz").status_code == 200
    assert made == [("GET", "/healthz", "2xx")]
    assert _count("GET", "/healthz", "2xx") == before + 5

    # a 404 from the resolver and a static path: their own labels, never the path
    gone = _count("GET", "unmatched", "4xx")
    for _ in range(3):
        assert client.get("/no/such/path/123").status_code == 404
    assert client.get("/static/nothing-here.css").status_code == 404
    assert _count("GET", "unmatched", "4xx") == gone + 3
    assert ("GET", "static", "4xx") in made
    assert all("no/such" not in value for values in made for value in values)

    # an unknown method is "other"; a route with a converter is its pattern
    assert client.generic("BREW", "/healthz").status_code == 405
    assert ("other", "/healthz", "4xx") in made
    client.get("/api/v1/runs/run_x")
    assert any(values[1] == "/api/v1/runs/<wire:run_id>" for values in made), made
    assert len(made) == len(set(made)) == len(middleware._children)
