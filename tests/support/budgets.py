"""Runs and usage through the wire, as runtimes send them."""

import json

RUNS = "/api/v1/runs"


def admit(api, run_id, *, agent="support-bot", principal="alice", limits=None, **extra):
    body = {"id": run_id, "agentId": agent, "agentVersion": 1, "principalId": principal}
    if principal is None:
        body.pop("principalId")
    if limits is not None:
        body["limits"] = limits
    body.update(extra)
    response = api.post(RUNS, body)
    assert response.status_code in (200, 201), response.content
    return response.json()


def step(seq, number, *, usage=(10, 5, 3), model="model-a", agent="support-bot", at=None):
    """step.started + step.finished (2 events from `seq`)."""
    i, o, c = usage
    finished = {
        "seq": seq + 1,
        "type": "step.finished",
        "step": number,
        "model": model,
        "usage": {"inputTokens": i, "outputTokens": o, "costMinorUnits": c},
    }
    if at:
        finished["at"] = at
    return [
        {"seq": seq, "type": "step.started", "step": number, "agentId": agent, "model": model},
        finished,
    ]


def post_events(api, run_id, events):
    response = api.post(f"{RUNS}/{run_id}/events", {"events": events})
    assert response.status_code == 200, response.content
    return response.json()


def spend(api, run_id, *, steps=1, **kwargs):
    """Finish `steps` more steps of the run, each with the given usage."""
    run = api.get(f"{RUNS}/{run_id}").json()
    events = []
    for n in range(steps):
        events += step(run["lastSeq"] + 1 + 2 * n, run["steps"] + 1 + n, **kwargs)
    return post_events(api, run_id, events)


def body(response):
    return json.loads(response.content)
