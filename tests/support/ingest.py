"""A run admitted and a call held through the ingest API.
(Moved from tests/approvals/test_ingest_hooks.py, which imports it from here.)"""

RUNS = "/api/v1/runs"


def admit_and_hold(api, run_id="run_hook", expires_at=None):
    api.post(RUNS, {"id": run_id, "agentId": "bot", "agentVersion": 1, "principalId": "p@x"})
    call = {
        "toolCallId": "call_1",
        "toolName": "send_email",
        "arguments": {"to": "bob@example.com"},
        "reason": "email needs a human",
        "rejectionMessage": "Not sent.",
    }
    if expires_at:
        call["expiresAt"] = expires_at
    events = [
        {"seq": 1, "type": "step.started", "step": 1, "agentId": "bot", "model": "m"},
        {"seq": 2, "type": "approval.requested", "step": 1, "calls": [call]},
    ]
    response = api.post(f"{RUNS}/{run_id}/events", {"events": events})
    assert response.status_code == 200, response.content
