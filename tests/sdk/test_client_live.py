"""The SDK client against a live console: snapshots, outcomes and the contract's errors as
typed exceptions (the paths the adapter tests do not take)."""

import uuid

import pytest
from gavel_sdk import Conflict, GavelClient, NotFound, Unauthorized, ValidationFailed

from tests.support.live_console import LiveConsole
from tests.support.states import state  # the shared RunState builder


def new_id(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_a_snapshot_put_creates_the_run_and_reads_back_as_a_run_state(gavel):
    run_id = new_id("run_snap")
    run = gavel.put_state(run_id, state(run_id))
    assert run.id == run_id and run.agent_version == 0 and run.steps == 1
    assert gavel.put_state(run_id, state(run_id)).last_seq == run.last_seq  # identical: no-op
    snapshot = gavel.get_state(run_id)
    assert snapshot["id"] == run_id and snapshot["userId"] == "alice@example.com"


def test_an_outcome_finishes_a_run_and_a_later_event_is_a_conflict(gavel):
    run_id = new_id("run_out")
    gavel.admit_run(run_id, agent_id="outcome-bot", principal_id=LiveConsole.PRINCIPAL)
    outcome = {
        "status": "DONE",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "result": {"text": "hello", "finishReason": "stop"},
        "steps": 1,
        "usage": {"inputTokens": 12, "outputTokens": 3, "costMinorUnits": 1},
        "traceIds": ["t1"],
    }
    run = gavel.post_outcome(run_id, outcome)
    assert run.status == "done" and run.usage.input_tokens == 12
    with pytest.raises(Conflict) as caught:
        gavel.send_events(run_id, [{"type": "todos.updated", "todos": []}])
    assert caught.value.code == "run_finished" and caught.value.status == 409


def test_contract_errors_arrive_as_typed_exceptions_with_their_codes(gavel, live_console):
    with pytest.raises(NotFound) as missing:
        gavel.get_run(new_id("run_none"))
    assert missing.value.status == 404
    run_id = new_id("run_bad")
    gavel.admit_run(run_id, agent_id="bad-bot", principal_id=LiveConsole.PRINCIPAL)
    with pytest.raises(ValidationFailed) as invalid:
        gavel.send_events(run_id, [{"type": "no.such.type"}])
    assert invalid.value.code == "validation_error" and invalid.value.details
    assert gavel.last_seq(run_id) == 0  # a refused batch moves nothing
    with GavelClient(live_console.url, "gvl_not_a_key") as stranger, pytest.raises(Unauthorized):
        stranger.get_run(run_id)
