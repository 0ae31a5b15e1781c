"""The SDK tests' run body.
(Moved from tests/sdk/test_client.py, which imports it from here.)"""


def run_body(run_id="run_1", last_seq=0, status="running", **extra):
    return {
        "id": run_id,
        "agentId": "bot",
        "agentVersion": 1,
        "currentAgentId": "bot",
        "principalId": "alice@example.com",
        "status": status,
        "usage": {"inputTokens": 0, "outputTokens": 0, "costMinorUnits": 0},
        "usageByModel": {},
        "steps": 0,
        "lastSeq": last_seq,
        "todos": [],
        "verdicts": {},
        "pendingCalls": [],
        **extra,
    }
