"""Fixtures shared by the runs tests."""

import pytest

from console.models import ApiKey
from tests.support.batches import RUNS, new_run
from tests.support.factories import make_key


@pytest.fixture
def admitted(ingest_a):
    """`run_1` admitted in tenant A (its wire resource)."""
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def decide_key(tenant_a, reviewer_a):
    """Tenant A's `decide` key of the reviewer, as the API's auth loads it (no `view_runs`)."""
    return ApiKey.objects.for_raw_key(make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
