"""Builders of wire RunStates and IRunOutcomes for the state and outcome tests."""

import copy

RUNS = "/api/v1/runs"


def state_url(run_id):
    return f"{RUNS}/{run_id}/state"


def outcome_url(run_id):
    return f"{RUNS}/{run_id}/outcome"


def usage(i=0, o=0, c=0):
    return {"inputTokens": i, "outputTokens": o, "costMinorUnits": c}


def step(n, *, agent="support-bot", model="model-a", u=(10, 5, 2), finished=True):
    out = {
        "stepNumber": n,
        "agentId": agent,
        "model": model,
        "usage": usage(*u),
        "startedAt": f"2026-12-02T10:{n:02d}:00Z",
    }
    if finished:
        out["finishedAt"] = f"2026-12-02T10:{n:02d}:30Z"
    return out


def text(role, words, **extra):
    return {"role": role, "content": [{"type": "text", "text": words}], **extra}


def approval(call_id, tool="send_email", sub=None, **extra):
    out = {
        "toolCallId": call_id,
        "toolName": tool,
        "arguments": {"to": "bob@example.com", "call": call_id},
        "reason": f"{tool} needs a human",
        "rejectionMessage": f"The user declined {tool}.",
        **extra,
    }
    if sub:
        out["subRunToolCallId"] = sub
    return out


def state(run_id="run_s1", **fields):
    """A small valid RunState (one finished step, two messages, running)."""
    out = {
        "id": run_id,
        "agentId": "support-bot",
        "currentAgentId": "support-bot",
        "sessionId": "conv_42",
        "userId": "alice@example.com",
        "status": "running",
        "steps": [step(1)],
        "messages": [text("user", "refund order 7"), text("assistant", "looking")],
        "pendingApprovals": [],
        "handoffs": [],
        "usage": usage(10, 5, 2),
        "startedAt": "2026-12-02T10:00:00Z",
    }
    out.update(fields)
    return out


def child_state(run_id="run_child", call_id="call_c"):
    return state(
        run_id,
        agentId="researcher",
        currentAgentId="researcher",
        status="awaiting_approval",
        steps=[step(1, agent="researcher", model="model-b", u=(4, 2, 1))],
        messages=[
            text("user", "find the invoice"),
            {
                "role": "assistant",
                "content": "",
                "toolCalls": [{"id": call_id, "name": "fetch_invoice", "arguments": {"n": 7}}],
            },
        ],
        pendingApprovals=[approval(call_id, tool="fetch_invoice")],
        usage=usage(4, 2, 1),
    )


def rich_state(run_id="run_rich"):
    """Two pending approvals, a handoff, a sub-run parked with one pending call (mirrored),
    todos, verdicts and a taint summary."""
    child = child_state()
    return state(
        run_id,
        status="awaiting_approval",
        steps=[step(1), step(2, model="model-a", u=(20, 8, 4))],
        messages=[
            text("user", "refund order 7 and mail bob"),
            {
                "role": "assistant",
                "content": "",
                "toolCalls": [
                    {"id": "call_a", "name": "send_email", "arguments": {"to": "bob"}},
                    {"id": "call_b", "name": "refund", "arguments": {"order": 7}},
                    {"id": "call_sub", "name": "researcher", "arguments": {}},
                ],
            },
        ],
        pendingApprovals=[
            approval("call_a"),
            approval("call_b", tool="refund"),
            approval("call_c", tool="fetch_invoice", sub="call_sub"),
        ],
        handoffs=[{"fromAgentId": "support-bot", "toAgentId": "researcher", "stepNumber": 2}],
        usage=usage(30, 13, 6),
        usageByModel={"model-a": usage(30, 13, 6)},
        todos=[
            {"id": "t1", "content": "refund", "status": "in_progress"},
            {"id": "t2", "content": "mail bob", "status": "pending"},
        ],
        verdicts={
            "1:0": {"verdict": "allowed", "guard": "pii", "reason": ""},
            "2:0": {"verdict": "flagged", "guard": "injection", "reason": "odd text"},
        },
        taintSummary={"untrustedInput": True, "exfiltrationRisk": False},
        promotedTools=["refund"],
        pendingSubRuns=[{"toolCallId": "call_sub", "state": child}],
    )


def outcome(status="DONE", **fields):
    out = {
        "status": status,
        "messages": [text("user", "refund order 7"), text("assistant", "done")],
        "steps": 1,
        "usage": usage(10, 5, 2),
        "traceIds": ["tr_1"],
    }
    out.update(fields)
    return out


def pending_call(call_id, tool="refund", arguments=None):
    return {
        "toolCall": {"id": call_id, "name": tool, "arguments": arguments or {"order": 7}},
        "rejectionMessage": f"The user declined {tool}.",
        "reason": f"{tool} moves money",
    }


def without_decisions(value):
    """A state read back, minus `decisions` at every depth (what GET adds)."""
    value = copy.deepcopy(value)
    value.pop("decisions", None)
    for entry in value.get("pendingSubRuns") or []:
        entry["state"] = without_decisions(entry["state"])
    return value
