"""Property tests (hypothesis): any valid RunState round-trips PUT → GET unchanged (apart from
the `decisions` GET adds), and any invalid one is a 422 that changes nothing."""

import base64
import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.models import Approval
from runs.models import Message, Run
from tests.support.states import state_url, without_decisions

pytestmark = pytest.mark.django_db

PROPERTY_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_ids = itertools.count()

# --- building blocks ---

safe_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=12,
)
wire_id = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=12)
count = st.integers(min_value=0, max_value=10**9)
json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    # Numbers compare as JSON numbers: PostgreSQL's jsonb rewrites 2.5e+16 as 25000000000000000,
    # the same IEEE double to a JavaScript runtime but an int to Python, so floats stay below 2**53.
    | st.floats(min_value=-(2.0**53), max_value=2.0**53, allow_nan=False)
    | safe_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(safe_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def iso_time(draw):
    moment = draw(
        st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1))
    ).replace(tzinfo=UTC)
    offset = draw(st.sampled_from([0, 60, -300, 330]))
    local = moment.astimezone(timezone(timedelta(minutes=offset)))
    text = local.isoformat(timespec=draw(st.sampled_from(["seconds", "milliseconds"])))
    return text.replace("+00:00", "Z") if draw(st.booleans()) else text


def usage_of():
    return st.fixed_dictionaries(
        {"inputTokens": count, "outputTokens": count, "costMinorUnits": count}
    )


def optional(strategy_by_key: dict):
    """A dict with any subset of the keys (absent keys stay absent)."""
    return st.fixed_dictionaries({}, optional=strategy_by_key)


media = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["image", "file"]),
        "mediaType": st.sampled_from(["image/png", "application/pdf"]),
        "data": st.one_of(
            st.binary(max_size=16).map(lambda b: {"$bytes": base64.b64encode(b).decode()}),
            wire_id.map(lambda p: {"$url": f"https://files.example.com/{p}"}),
        ),
    }
)
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": safe_text}),
    st.fixed_dictionaries({"type": st.just("json"), "value": json_value}),
    media,
)
tool_call = st.fixed_dictionaries(
    {"id": wire_id, "name": wire_id}, optional={"arguments": json_value}
)
message = st.builds(
    lambda base, extra: {**base, **extra},
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant", "tool"]),
            "content": safe_text | st.lists(part, max_size=3),
        }
    ),
    optional({"toolCalls": st.lists(tool_call, max_size=2), "toolCallId": wire_id}),
)


@st.composite
def steps_of(draw):
    numbers = draw(st.lists(st.integers(min_value=1, max_value=60), unique=True, max_size=4))
    return [
        {
            "stepNumber": n,
            "agentId": draw(wire_id),
            "model": draw(wire_id),
            "usage": draw(usage_of()),
            "startedAt": draw(iso_time()),
            **draw(optional({"finishedAt": iso_time()})),
        }
        for n in numbers
    ]


def approvals_of(prefix: str):
    call = st.fixed_dictionaries(
        {
            "toolName": wire_id,
            "reason": safe_text,
            "rejectionMessage": safe_text,
        },
        optional={"arguments": json_value},
    )
    return st.lists(call, max_size=3).map(
        lambda calls: [{"toolCallId": f"{prefix}{i}", **c} for i, c in enumerate(calls)]
    )


verdict_key = st.tuples(st.integers(0, 60), st.integers(0, 5)).map(lambda t: f"{t[0]}:{t[1]}")
verdict = st.fixed_dictionaries(
    {
        "verdict": st.sampled_from(["allowed", "flagged", "blocked"]),
        "guard": safe_text,
        "reason": safe_text,
    }
)
todo = st.fixed_dictionaries(
    {
        "id": wire_id,
        "content": safe_text,
        "status": st.sampled_from(["pending", "in_progress", "done"]),
    }
)


@st.composite
def run_state(draw, *, prefix="p", with_sub_runs=True):
    status = draw(
        st.sampled_from(["running", "awaiting_approval", "completed", "failed", "aborted"])
    )
    finished = status in ("completed", "failed", "aborted")
    out = {
        "id": "placeholder",
        "agentId": draw(wire_id),
        "currentAgentId": draw(wire_id),
        "sessionId": draw(st.none() | wire_id),
        "status": status,
        "steps": draw(steps_of()),
        "messages": draw(st.lists(message, max_size=4)),
        "pendingApprovals": [] if finished else draw(approvals_of(f"{prefix}call")),
        "handoffs": draw(
            st.lists(
                st.fixed_dictionaries(
                    {"fromAgentId": wire_id, "toAgentId": wire_id, "stepNumber": st.integers(0, 60)}
                ),
                max_size=2,
            )
        ),
        "usage": draw(usage_of()),
        "startedAt": draw(iso_time()),
    }
    out.update(
        draw(
            optional(
                {
                    "userId": st.sampled_from(["alice@example.com", "bob@example.com"]),
                    "usageByModel": st.dictionaries(wire_id, usage_of(), max_size=2),
                    "todos": st.lists(todo, max_size=3),
                    "verdicts": st.dictionaries(verdict_key, verdict, max_size=3),
                    "taintSummary": st.dictionaries(safe_text, json_value, max_size=3),
                    "promotedTools": st.lists(wire_id, max_size=2),
                    "finishedAt": iso_time(),
                    "error": st.fixed_dictionaries({"code": wire_id, "message": safe_text}),
                }
            )
        )
    )
    if with_sub_runs and not finished and draw(st.booleans()):
        child = draw(run_state(prefix="sub", with_sub_runs=False).filter(_not_finished))
        held = child["pendingApprovals"]
        mirrored = draw(st.lists(st.sampled_from(held), unique_by=_call_id)) if held else []
        out["pendingApprovals"] += [{**a, "subRunToolCallId": "call_sub"} for a in mirrored]
        out["pendingSubRuns"] = [{"toolCallId": "call_sub", "state": child}]
    return out


def _not_finished(state):
    return state["status"] in ("running", "awaiting_approval")


def _call_id(approval):
    return approval["toolCallId"]


def with_fresh_ids(state):
    """Each example gets its own run ids (the database is shared by all examples)."""
    run_id = f"prop_{next(_ids)}"
    state = {**state, "id": run_id}
    if "pendingSubRuns" in state:
        state["pendingSubRuns"] = [
            {**e, "state": {**e["state"], "id": f"{run_id}_child{i}"}}
            for i, e in enumerate(state["pendingSubRuns"])
        ]
    return state


def held(run_id):
    run = Run.objects.filter(external_id=run_id).first()
    if run is None:
        return None
    return (
        run.snapshot_digest,
        run.updated_at,
        Message.objects.filter(run=run).count(),
        sorted(Approval.objects.filter(run=run).values_list("tool_call_id", "status")),
    )


# --- valid states round-trip ---


@PROPERTY_SETTINGS
@given(raw=run_state())
def test_a_valid_state_reads_back_unchanged(ingest_a, raw):
    body = with_fresh_ids(raw)
    response = ingest_a.put(state_url(body["id"]), body)
    assert response.status_code == 201, response.content
    got = ingest_a.get(state_url(body["id"]))
    assert got.status_code == 200, got.content
    assert without_decisions(got.json()) == body
    assert ingest_a.put(state_url(body["id"]), body).status_code == 200  # identical: a no-op
    for entry in body.get("pendingSubRuns") or []:
        child = ingest_a.get(state_url(entry["state"]["id"])).json()
        assert without_decisions(child) == entry["state"]


# --- invalid states are 422 and change nothing ---


def _mutations(draw, body):
    """(name, mutated body) for one way of making a valid state invalid."""
    kind = draw(
        st.sampled_from(
            [
                "id",
                "status",
                "raw_bytes",
                "verdict_key",
                "missing",
                "unknown_field",
                "bad_usage",
                "duplicate_step",
                "bad_time",
                "nul",
                "unknown_sub_run",
            ]
        )
    )
    bad = dict(body)
    if kind == "id":
        bad["id"] = body["id"] + "_other"
    elif kind == "status":
        bad["status"] = draw(safe_text.filter(lambda s: s not in _STATUSES))
    elif kind == "raw_bytes":
        data = draw(
            st.binary(min_size=1, max_size=8).map(lambda b: base64.b64encode(b).decode())
            | st.just({"0": 137, "1": 80})
        )
        bad["messages"] = [
            *body["messages"],
            {
                "role": "user",
                "content": [{"type": "image", "mediaType": "image/png", "data": data}],
            },
        ]
    elif kind == "verdict_key":
        key = draw(safe_text.filter(lambda k: not _VERDICT_KEY(k)))
        bad["verdicts"] = {key: {"verdict": "allowed", "guard": "g", "reason": ""}}
    elif kind == "missing":
        del bad[draw(st.sampled_from(_REQUIRED))]
    elif kind == "unknown_field":
        bad[draw(wire_id.filter(lambda k: k not in _KNOWN))] = 1
    elif kind == "bad_usage":
        bad["usage"] = {**body["usage"], "inputTokens": draw(st.integers(max_value=-1) | safe_text)}
    elif kind == "duplicate_step":
        one = {
            "stepNumber": 1,
            "agentId": "a",
            "model": "m",
            "usage": body["usage"],
            "startedAt": "2026-12-02T10:00:00Z",
        }
        bad["steps"] = [one, one]
    elif kind == "bad_time":
        bad["startedAt"] = draw(st.sampled_from(["yesterday", "2026-12-02T10:00:00", "2026-13-01"]))
    elif kind == "nul":
        bad["messages"] = [*body["messages"], {"role": "user", "content": "a\x00b"}]
    else:
        bad["status"] = "awaiting_approval"
        bad["pendingApprovals"] = [
            {
                "toolCallId": "orphan",
                "toolName": "t",
                "reason": "",
                "rejectionMessage": "",
                "subRunToolCallId": "nowhere",
            }
        ]
    return kind, bad


_STATUSES = {"running", "awaiting_approval", "completed", "failed", "aborted"}
_REQUIRED = [
    "id",
    "agentId",
    "currentAgentId",
    "sessionId",
    "status",
    "steps",
    "messages",
    "pendingApprovals",
    "handoffs",
    "usage",
    "startedAt",
]
_KNOWN = set(_REQUIRED) | {
    "userId",
    "usageByModel",
    "todos",
    "verdicts",
    "taintSummary",
    "promotedTools",
    "pendingSubRuns",
    "finishedAt",
    "error",
    "decisions",
}
_KNOWN |= {  # snake_case names are accepted too (the schemas populate by name)
    "agent_id",
    "current_agent_id",
    "session_id",
    "user_id",
    "pending_approvals",
    "usage_by_model",
    "taint_summary",
    "promoted_tools",
    "pending_sub_runs",
    "started_at",
    "finished_at",
}


def _VERDICT_KEY(key):
    import re

    return re.fullmatch(r"(0|[1-9][0-9]*):(0|[1-9][0-9]*)", key) is not None


@PROPERTY_SETTINGS
@given(raw=run_state(), data=st.data())
def test_an_invalid_state_is_422_and_changes_nothing(ingest_a, raw, data):
    body = with_fresh_ids(raw)
    kind, bad = _mutations(data.draw, body)
    # For a run that does not exist yet: nothing is created.
    response = ingest_a.put(state_url(body["id"]), bad)
    assert response.status_code == 422, (kind, response.content)
    assert response.json()["error"]["details"], kind
    assert held(body["id"]) is None
    # For a run that holds a state: it still holds exactly that state.
    assert ingest_a.put(state_url(body["id"]), body).status_code == 201
    before = held(body["id"])
    response = ingest_a.put(state_url(body["id"]), bad)
    assert response.status_code == 422, (kind, response.content)
    assert held(body["id"]) == before
    assert without_decisions(ingest_a.get(state_url(body["id"])).json()) == body
