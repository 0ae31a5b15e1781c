"""Builders of admissions and event batches for the run API tests (tests/runs/test_api_*.py).
The `admitted` fixture that uses them is in tests/runs/conftest.py."""

from tests.support.states import RUNS


def new_run(run_id="run_1", **extra):
    body = {
        "id": run_id,
        "agentId": "support-bot",
        "agentVersion": 3,
        "principalId": "alice@example.com",
        "roleIds": ["editor"],
        "conversationId": "conv_42",
        "input": {"ask": "refund order 7"},
        "limits": {"maxSteps": 20},
        "startedAt": "2026-12-02T10:00:00Z",
    }
    body.update(extra)
    return body


def events_url(run_id="run_1"):
    return f"{RUNS}/{run_id}/events"


def step_events(first_seq, step, *, model="model-a", usage=(10, 5, 3), agent="support-bot"):
    i, o, c = usage
    return [
        {"seq": first_seq, "type": "step.started", "step": step, "agentId": agent, "model": model},
        {
            "seq": first_seq + 1,
            "type": "message",
            "step": step,
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        },
        {
            "seq": first_seq + 2,
            "type": "step.finished",
            "step": step,
            "model": model,
            "finishReason": "stop",
            "traceId": f"tr_{step}",
            "usage": {"inputTokens": i, "outputTokens": o, "costMinorUnits": c},
        },
    ]


def finished(seq, status="done"):
    return {"seq": seq, "type": "run.finished", "status": status, "result": {"text": "bye"}}


def post_events(api, events, run_id="run_1"):
    return api.post(events_url(run_id), {"events": events})


def approval_requested(seq, *ids):
    return {
        "seq": seq,
        "type": "approval.requested",
        "step": 1,
        "calls": [
            {
                "toolCallId": i,
                "toolName": "send_email",
                "arguments": {"to": "bob"},
                "reason": "email needs a human",
                "rejectionMessage": "The user declined.",
            }
            for i in ids
        ],
    }
