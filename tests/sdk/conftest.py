"""Fixtures of the SDK tests: a live console (daphne subprocess) and SDK clients for it."""

import pytest
from gavel_sdk import GavelClient, RetryPolicy

from tests.support.live_console import LiveConsole


@pytest.fixture(scope="session")
def live_console(tmp_path_factory):
    console = LiveConsole(tmp_path_factory.mktemp("gavel-live"))
    console.provision()
    console.start()
    yield console
    console.stop()


@pytest.fixture
def gavel(live_console):
    """The runtime's client (ingest key); retries quickly enough for a restart."""
    with GavelClient(
        live_console.url, live_console.ingest_key, retry=RetryPolicy(attempts=40, base=0.1, cap=1.0)
    ) as client:
        yield client


@pytest.fixture
def reviewer(live_console):
    """The reviewer's client (decide key, bound to a reviewer principal)."""
    with GavelClient(live_console.url, live_console.decide_key) as client:
        yield client
