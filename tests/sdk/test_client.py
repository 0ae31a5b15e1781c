"""The SDK client against a scripted server (httpx.MockTransport): numbering, batching,
retries, gap resync, long-poll and the contract's errors. No Django, no network."""

import json

import httpx
import pytest
from gavel_sdk import (
    AlreadyDecided,
    AsyncGavelClient,
    ConnectionFailed,
    DecisionsTimeout,
    GavelClient,
    RetryPolicy,
    RunEvents,
    SeqGap,
    Unauthorized,
    Usage,
    ValidationFailed,
)

from tests.support.sdk import run_body

FAST = RetryPolicy(attempts=4, base=0.0, cap=0.0)


def error(status, code, message="nope", details=None, headers=None):
    body = {"error": {"code": code, "message": message, "details": details}}
    return httpx.Response(status, json=body, headers=headers)


class Server:
    """A scripted console: `answers` are consumed in order; requests are recorded."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request):
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer

    def bodies(self):
        return [json.loads(r.content) for r in self.requests if r.content]


def client_for(server, **kwargs):
    kwargs.setdefault("retry", FAST)
    return GavelClient(
        "http://gavel.test", "gvl_key", transport=httpx.MockTransport(server), **kwargs
    )


def test_admit_run_sends_the_new_run_shape_and_returns_a_typed_run():
    server = Server(httpx.Response(201, json=run_body(last_seq=0)))
    with client_for(server) as gavel:
        run = gavel.admit_run(
            "run_1", agent_id="bot", agent_version=1, principal_id="alice@example.com"
        )
    request = server.requests[0]
    assert request.method == "POST"
    assert request.url.path == "/api/v1/runs"
    assert request.headers["Authorization"] == "Bearer gvl_key"
    assert json.loads(request.content) == {
        "id": "run_1",
        "agentId": "bot",
        "agentVersion": 1,
        "principalId": "alice@example.com",
    }
    assert run.id == "run_1" and run.status == "running" and run.usage == Usage()


def test_events_are_numbered_after_the_runs_last_seq_and_batched():
    server = Server(
        httpx.Response(200, json=run_body(last_seq=3)),
        httpx.Response(200, json={"lastSeq": 5}),
        httpx.Response(200, json={"lastSeq": 6}),
    )
    events = RunEvents(agent_id="bot", model="m")
    events.step_started()
    events.message("user", "hi")
    events.step_finished(Usage(10, 5, 1))
    with client_for(server, batch_size=2) as gavel:
        assert gavel.send_events("run_1", events.drain()) == 6
        assert gavel.last_seq("run_1") == 6
    first, second = server.bodies()
    assert [e["seq"] for e in first["events"]] == [4, 5]
    assert [e["seq"] for e in second["events"]] == [6]
    assert second["events"][0]["usage"] == {
        "inputTokens": 10,
        "outputTokens": 5,
        "costMinorUnits": 1,
    }


def test_a_network_error_is_retried_with_the_identical_batch():
    server = Server(
        httpx.Response(201, json=run_body()),
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.Response(200, json={"lastSeq": 1}),
    )
    with client_for(server) as gavel:
        gavel.admit_run("run_1", agent_id="bot", principal_id="alice@example.com")
        assert gavel.send_events("run_1", [{"type": "todos.updated", "todos": []}]) == 1
    attempts = [r.content for r in server.requests[1:]]
    assert len(attempts) == 3 and len(set(attempts)) == 1
    assert json.loads(attempts[0])["events"][0]["seq"] == 1


def test_5xx_and_429_are_retried_honouring_retry_after():
    server = Server(
        httpx.Response(201, json=run_body()),
        error(503, "database_unavailable", headers={"Retry-After": "0"}),
        error(429, "rate_limited", headers={"Retry-After": "0"}),
        httpx.Response(500, text="boom"),
        httpx.Response(200, json={"lastSeq": 1}),
    )
    with client_for(server) as gavel:
        gavel.admit_run("run_1", agent_id="bot", principal_id="alice@example.com")
        assert gavel.send_events("run_1", [{"type": "todos.updated", "todos": []}]) == 1
    assert len(server.requests) == 5


def test_a_server_that_stays_down_raises_connection_failed_after_every_attempt():
    server = Server(*[httpx.ConnectError("refused")] * 4)
    with client_for(server) as gavel, pytest.raises(ConnectionFailed) as caught:
        gavel.get_run("run_1")
    assert caught.value.code == "connection_failed"
    assert len(server.requests) == 4


def test_a_seq_gap_renumbers_from_the_servers_expected_seq():
    server = Server(
        httpx.Response(201, json=run_body(last_seq=7)),
        error(409, "seq_gap", details={"expectedSeq": 3, "lastSeq": 2}),
        httpx.Response(200, json={"lastSeq": 4}),
    )
    with client_for(server) as gavel:
        gavel.admit_run("run_1", agent_id="bot", principal_id="alice@example.com")
        events = [{"type": "todos.updated", "todos": []}] * 2
        assert gavel.send_events("run_1", events) == 4
    gap, resent = server.bodies()[1:]
    assert [e["seq"] for e in gap["events"]] == [8, 9]
    assert [e["seq"] for e in resent["events"]] == [3, 4]


def test_a_gap_that_never_closes_raises_seq_gap_with_the_expected_seq():
    gap = error(409, "seq_gap", details={"expectedSeq": 1, "lastSeq": 0})
    server = Server(httpx.Response(200, json=run_body(last_seq=5)), *[gap] * 4)
    with client_for(server) as gavel, pytest.raises(SeqGap) as caught:
        gavel.send_events("run_1", [{"type": "todos.updated", "todos": []}])
    assert caught.value.expected_seq == 1 and caught.value.status == 409


def test_contract_errors_carry_status_code_and_details():
    details = [{"path": "events.0.type", "message": "unknown"}]
    server = Server(
        error(422, "validation_error", "the request body is invalid", details),
        error(401, "unauthorized"),
        error(409, "already_decided", details={"decidedBy": "bob", "status": "approved"}),
    )
    with client_for(server) as gavel:
        with pytest.raises(ValidationFailed) as invalid:
            gavel.put_state("run_1", {"id": "run_1"})
        with pytest.raises(Unauthorized):
            gavel.get_state("run_1")
        with pytest.raises(AlreadyDecided) as decided:
            gavel.decide("apr_1", "deny", message="no")
    assert invalid.value.code == "validation_error" and invalid.value.details == details
    assert decided.value.details["decidedBy"] == "bob"
    assert len(server.requests) == 3  # 4xx is never retried


def test_decide_sends_edited_arguments_only_when_given():
    approval = {
        "id": "apr_1",
        "runId": "run_1",
        "step": 1,
        "toolCallId": "c1",
        "toolName": "send",
        "arguments": {"to": "x"},
        "reason": "",
        "rejectionMessage": "",
        "status": "approved",
        "decidedBy": "rev",
        "message": None,
    }
    server = Server(httpx.Response(200, json=approval), httpx.Response(200, json=approval))
    with client_for(server) as gavel:
        assert gavel.decide("apr_1", "approve", arguments={"to": "x"}).status == "approved"
        gavel.decide("apr_1", "deny", message="Not today")
    assert server.bodies() == [
        {"decision": "approve", "arguments": {"to": "x"}},
        {"decision": "deny", "message": "Not today"},
    ]


def decision(call_id, verdict="denied", message="no", arguments=None):
    return {
        "approvalId": f"apr_{call_id}",
        "toolCallId": call_id,
        "decision": verdict,
        "message": message,
        "arguments": arguments,
        "decidedBy": "rev",
        "decidedAt": "2026-12-02T10:00:00Z",
    }


def test_wait_for_decisions_long_polls_with_the_cursor_until_complete():
    server = Server(
        httpx.Response(
            200,
            json={
                "complete": False,
                "decisions": [decision("c1")],
                "pending": ["c2"],
                "cursor": "4",
            },
        ),
        httpx.Response(
            200,
            json={
                "complete": True,
                "decisions": [decision("c2", "approved", None, {"n": 2})],
                "pending": [],
                "cursor": "5",
            },
        ),
    )
    with client_for(server) as gavel:
        got = gavel.wait_for_decisions("run_1", timeout=60)
    assert got.complete and got.pending == [] and got.cursor == "5"
    assert got["c1"].message == "no" and got["c2"].approved and got["c2"].arguments == {"n": 2}
    first, second = (r.url.params for r in server.requests)
    assert first["after"] == "0" and second["after"] == "4"
    assert float(first["wait"]) == 30.0  # never more than the contract's 30 s


def test_wait_for_named_calls_stops_once_they_are_decided():
    server = Server(
        httpx.Response(
            200,
            json={
                "complete": False,
                "decisions": [decision("c1")],
                "pending": ["c9"],
                "cursor": "1",
            },
        ),
    )
    with client_for(server) as gavel:
        got = gavel.wait_for_decisions("run_1", timeout=60, tool_call_ids=["c1"])
    assert got.complete and list(got.decisions) == ["c1"]


def test_wait_for_decisions_times_out_with_what_is_still_pending():
    pending = {"complete": False, "decisions": [], "pending": ["c1"], "cursor": "0"}
    server = Server(httpx.Response(200, json=pending))
    with client_for(server) as gavel:
        got = gavel.wait_for_decisions("run_1", timeout=0)
        assert not got.complete and got.pending == ["c1"]
        server.answers.append(httpx.Response(200, json=pending))
        with pytest.raises(DecisionsTimeout) as caught:
            gavel.wait_for_decisions("run_1", timeout=0, raise_on_timeout=True)
    assert caught.value.pending == ["c1"]
    assert float(server.requests[0].url.params["wait"]) == 0.0


async def test_the_async_client_numbers_retries_and_resyncs_the_same_way():
    server = Server(
        httpx.Response(200, json=run_body(last_seq=2)),
        httpx.ConnectError("refused"),
        error(409, "seq_gap", details={"expectedSeq": 2, "lastSeq": 1}),
        httpx.Response(200, json={"lastSeq": 2}),
    )
    transport = httpx.MockTransport(server)
    async with AsyncGavelClient("http://gavel.test", "k", transport=transport, retry=FAST) as gavel:
        run = await gavel.get_run("run_1")
        assert run.last_seq == 2
        assert await gavel.send_events("run_1", [{"type": "todos.updated", "todos": []}]) == 2
    seqs = [b["events"][0]["seq"] for b in server.bodies()]
    assert seqs == [3, 3, 2]


def test_batch_size_outside_the_contract_is_refused():
    with pytest.raises(ValueError, match="batch_size"):
        GavelClient("http://gavel.test", "k", batch_size=501)


def test_a_complete_answer_missing_a_named_call_is_read_again_after_its_cursor():
    """A decision that lands while the server builds an answer may be left for the next read
    (after the answer's cursor) even though that answer says nothing is pending."""
    server = Server(
        httpx.Response(
            200,
            json={"complete": True, "decisions": [decision("c1")], "pending": [], "cursor": "1"},
        ),
        httpx.Response(
            200,
            json={
                "complete": True,
                "decisions": [decision("c2", "approved")],
                "pending": [],
                "cursor": "2",
            },
        ),
    )
    with client_for(server) as gavel:
        got = gavel.wait_for_decisions("run_1", timeout=60, tool_call_ids=["c1", "c2"])
    assert got.complete and set(got.decisions) == {"c1", "c2"}
    assert server.requests[1].url.params["after"] == "1"


def test_named_calls_the_run_never_held_end_the_wait_once_nothing_is_pending():
    empty = {"complete": True, "decisions": [], "pending": [], "cursor": "0"}
    server = Server(httpx.Response(200, json=empty))
    with client_for(server) as gavel:
        got = gavel.wait_for_decisions("run_1", timeout=60, tool_call_ids=["nope"])
    assert not got.complete and got.pending == ["nope"] and len(server.requests) == 1
