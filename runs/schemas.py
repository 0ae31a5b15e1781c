"""The runs API at the schema edge: camelCase on the wire, snake_case in Python.

Inputs forbid unknown fields (a misspelt field is a 422, not silently dropped); events are a
discriminated union on `type`, so an unknown type is a 422 naming the allowed ones.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from approvals.schemas import ApprovalOut
from console.core.wire import (
    INT32_MAX,
    INT64_MAX,
    CamelModel,
    Int32,
    Int64,
    OptionalCursor,
    StrictBool,
    WireDatetime,
    wire_int,
)

RUN_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
MAX_EVENTS = 500

RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN, min_length=1, max_length=128)]
WireId = Annotated[str, Field(min_length=1, max_length=255)]
Count = Int64
# Usage figures: at most 2**53 - 1, the largest integer every JSON client reads exactly. A
# request whose sums (the run's, its model's, the tenant's day) would pass 2**63 - 1 is a 422
# and changes nothing (console/api.py, on_out_of_range).
USAGE_MAX = 2**53 - 1
UsageCount = wire_int(le=USAGE_MAX)
StepNumber = wire_int(ge=1, le=INT32_MAX)
Seq = wire_int(ge=1, le=INT64_MAX)
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
HTTP_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\[\]]+(?:[/?#].*)?$"
RunStatusLiteral = Literal["running", "awaiting_approval", "done", "aborted", "failed"]
FinishedStatus = Literal["done", "aborted", "failed"]


class In(CamelModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# --- admission ---


class LimitsIn(In):
    """Each limit is optional (left out: no limit) and never null: the run resource answers
    only the limits that are set."""

    cost_ceiling_minor_units: Int64 = None
    max_steps: Int32 = None
    wall_clock_timeout_ms: Int64 = None


class NewRunIn(In):
    id: RunId
    agent_id: WireId
    agent_version: Int32
    principal_id: WireId
    role_ids: list[WireId] = Field(default_factory=list)
    conversation_id: WireId | None = None
    parent_run_id: RunId | None = None
    input: Any = None
    limits: LimitsIn | None = None
    started_at: WireDatetime | None = None


# --- message parts ---


class BytesEnvelope(In):
    bytes_: str = Field(
        alias="$bytes", pattern=BASE64_PATTERN, description="standard base64, padded"
    )

    @field_validator("bytes_")
    @classmethod
    def _base64(cls, value: str) -> str:
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("$bytes must be base64") from None
        return value


class UrlEnvelope(In):
    url: str = Field(alias="$url", pattern=HTTP_URL_PATTERN, description="an http(s) URL")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("$url must be an http(s) URL")
        return value


class TextPart(In):
    type: Literal["text"]
    text: str


class JsonPart(In):
    type: Literal["json"]
    value: Any


class MediaPart(In):
    type: Literal["image", "file"]
    media_type: Annotated[str, Field(min_length=1, max_length=255)]
    data: BytesEnvelope | UrlEnvelope


Part = Annotated[TextPart | JsonPart | MediaPart, Field(discriminator="type")]


class ToolCallIn(In):
    id: WireId
    name: WireId
    arguments: Any = None


class MessageIn(In):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[Part]
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: WireId | None = None


# --- events ---


class UsageIn(In):
    input_tokens: UsageCount
    output_tokens: UsageCount
    cost_minor_units: UsageCount


class EventBase(In):
    seq: Seq
    at: WireDatetime | None = None


class StepStarted(EventBase):
    type: Literal["step.started"]
    step: StepNumber
    agent_id: WireId
    model: Annotated[str, Field(max_length=255)]


class MessageEvent(EventBase):
    type: Literal["message"]
    step: StepNumber
    message: MessageIn


class ToolResultEvent(EventBase):
    type: Literal["tool.result"]
    step: StepNumber
    tool_call_id: WireId
    tool_name: WireId
    result: Any = None
    is_error: StrictBool


class StepFinished(EventBase):
    type: Literal["step.finished"]
    step: StepNumber
    usage: UsageIn
    model: Annotated[str, Field(max_length=255)]
    finish_reason: Annotated[str, Field(max_length=64)] | None = None
    trace_id: Annotated[str, Field(max_length=255)] | None = None


class ApprovalCallIn(In):
    tool_call_id: WireId
    tool_name: WireId
    arguments: Any = None
    reason: str = ""
    rejection_message: str = ""
    sub_run_tool_call_id: WireId | None = None
    expires_at: WireDatetime | None = None


class ApprovalRequested(EventBase):
    type: Literal["approval.requested"]
    step: StepNumber
    calls: Annotated[
        list[ApprovalCallIn],
        Field(min_length=1, description="never empty; each call's toolCallId distinct"),
    ]

    @model_validator(mode="after")
    def _distinct_calls(self):
        ids = [c.tool_call_id for c in self.calls]
        if len(set(ids)) != len(ids):
            raise ValueError("calls must have distinct toolCallIds")
        return self


class HandoffEvent(EventBase):
    type: Literal["handoff"]
    step: StepNumber
    from_agent_id: WireId
    to_agent_id: WireId
    child_run_id: RunId | None = None


class HandoffReturned(EventBase):
    type: Literal["handoff.returned"]
    step: StepNumber
    to_agent_id: WireId


class TodoIn(In):
    id: WireId
    content: str
    status: Literal["pending", "in_progress", "done"]


class TodosUpdated(EventBase):
    type: Literal["todos.updated"]
    todos: list[TodoIn]


class VerdictEvent(EventBase):
    type: Literal["verdict"]
    turn: Annotated[str, Field(pattern=r"^[0-9]+:[0-9]+$", max_length=32)]
    verdict: Literal["allowed", "flagged", "blocked"]
    guard: Annotated[str, Field(max_length=255)]
    reason: str


class TaintUpdated(EventBase):
    type: Literal["taint.updated"]
    taint_summary: dict[str, Any]


class RunErrorIn(In):
    code: Annotated[str, Field(min_length=1, max_length=255)]
    message: str


class RunFinished(EventBase):
    type: Literal["run.finished"]
    status: FinishedStatus
    result: Any = None
    ended_by_tool: WireId | None = None
    finish_reason: Annotated[str, Field(max_length=64)] | None = None
    usage_denied: dict[str, Any] | None = None
    error: RunErrorIn | None = None


Event = Annotated[
    StepStarted
    | MessageEvent
    | ToolResultEvent
    | StepFinished
    | ApprovalRequested
    | HandoffEvent
    | HandoffReturned
    | TodosUpdated
    | VerdictEvent
    | TaintUpdated
    | RunFinished,
    Field(discriminator="type"),
]


class EventBatchIn(In):
    events: Annotated[list[Event], Field(min_length=1, max_length=MAX_EVENTS)]


# A batch's events in their normalized wire form (what is stored and compared), in one pass.
EVENTS = TypeAdapter(list[Event])


class EventsAppliedOut(CamelModel):
    last_seq: int


# --- the run resource ---


class RunUsageOut(CamelModel):
    input_tokens: int
    output_tokens: int
    cost_minor_units: int


class TodoOut(CamelModel):
    id: str
    content: str
    status: str


class VerdictOut(CamelModel):
    verdict: str
    guard: str
    reason: str


class RunErrorOut(CamelModel):
    code: str
    message: str


class RunOut(CamelModel):
    id: str
    agent_id: str
    agent_version: int
    current_agent_id: str
    principal_id: str | None
    role_ids: list[str]
    conversation_id: str | None
    parent_run_id: str | None
    status: RunStatusLiteral
    input: Any
    limits: dict[str, int] = Field(
        description="the run's ceilings as admitted: costCeilingMinorUnits, maxSteps, "
        "wallClockTimeoutMs (each present only when set)"
    )
    usage: RunUsageOut
    usage_by_model: dict[str, RunUsageOut]
    steps: int
    last_seq: int
    todos: list[TodoOut]
    verdicts: dict[str, VerdictOut]
    taint_summary: dict[str, Any] | None
    pending_calls: list[ApprovalOut]
    result: Any
    ended_by_tool: str | None
    finish_reason: str | None
    usage_denied: dict[str, Any] | None
    error: RunErrorOut | None
    started_at: datetime
    finished_at: datetime | None


class RunListOut(CamelModel):
    items: list[RunOut]
    next_cursor: str | None


class RunListQuery(In):
    principal_id: str | None = None
    conversation_id: str | None = None
    agent_id: str | None = None
    status: RunStatusLiteral | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None
