"""Fixtures of the run API tests."""

import pytest

from tests.runs.batches import RUNS, new_run


@pytest.fixture
def admitted(ingest_a):
    """`run_1` admitted in tenant A (its wire resource)."""
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 201, response.content
    return response.json()
