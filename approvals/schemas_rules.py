"""Rules on the wire (contract v1.1, "Rules: lasting decisions"): the rule resource, bodies to
create, change, explain and preview, suggestions. Conditions and examples are checked by
approvals/rules/ (pure), so a 422 names the condition (`conditions.3.op`) or the example
(`examples.match.0`) whichever way a rule is saved (API or console)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Field
from pydantic import ConfigDict, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

from approvals.models import Rule
from approvals.rules import (
    MAX_CONDITIONS,
    OPS,
    RuleInvalid,
    RuleSpec,
    conditions_validate,
    examples_normalized,
    examples_problems,
)
from console.core.errors import Invalid
from console.core.wire import CamelSchema, OptionalCursor, StrictBool, WireDatetime

Pattern = Annotated[str, Field(min_length=1, max_length=255)]
WireId = Annotated[str, Field(min_length=1, max_length=255)]
RunId = Annotated[str, Field(min_length=1, max_length=128)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Message = Annotated[str, Field(max_length=10_000)]
Effect = Literal["approve", "deny"]

# The shape of a condition, as approvals/rules/conditions.py checks it (the schema only says
# it; that module still validates): a path part is any run of characters but `.`, Python's
# whitespace (str.isspace) and U+0000; at most 32 parts and 256 characters.
_PART = (
    "[^.\\u0000\\t\\n\\u000b\\u000c\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680"
    "\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]+"
)
CONDITION_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "maxLength": 256,
            "pattern": f"^{_PART}(\\.{_PART}){{0,31}}$",
            "description": "a dotted path into the call's arguments (to, recipients.0, "
            "options.dryRun); an integer part also indexes a list",
        },
        "op": {"type": "string", "enum": list(OPS)},
        "value": {
            "description": "exists, notExists: none (or null); startsWith, endsWith, glob: a "
            "string of at most 1,000 characters; lt, lte, gt, gte: a number; in: a list of at "
            "most 1,000 values; equals, notEquals, contains: any JSON value. Otherwise a 422 "
            "naming conditions.N.value"
        },
    },
    "required": ["path", "op"],
    "additionalProperties": False,
}
Conditions = Annotated[
    list[Any],
    WithJsonSchema(
        {
            "type": "array",
            "items": CONDITION_SCHEMA,
            "maxItems": MAX_CONDITIONS,
            "description": "every condition must hold for the rule to match",
        }
    ),
]


class In(CamelSchema):
    """A misspelt field is a 422, never silently dropped."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ExamplesIn(In):
    match: list[Any] = Field(default_factory=list)
    no_match: list[Any] = Field(default_factory=list)


class RuleIn(In):
    """`POST /rules`: a new rule (or an unsaved one to preview)."""

    name: Name
    effect: Effect
    tool_pattern: Pattern = "*"
    agent_pattern: Pattern = "*"
    principal_pattern: Pattern = "*"
    conversation_id: WireId | None = None
    run_id: RunId | None = None
    conditions: Conditions = Field(default_factory=list)
    message: Message | None = None
    expires_at: WireDatetime | None = None
    active: StrictBool = True
    examples: ExamplesIn | None = None


NULLABLE = {"conversation_id", "run_id", "message", "expires_at", "examples"}


class RulePatchIn(In):
    """`PATCH /rules/{ruleId}`: any of the fields; null clears the nullable ones."""

    name: Name = None
    effect: Effect = None
    tool_pattern: Pattern = None
    agent_pattern: Pattern = None
    principal_pattern: Pattern = None
    conversation_id: WireId | None = None
    run_id: RunId | None = None
    conditions: Conditions = None
    message: Message | None = None
    expires_at: WireDatetime | None = None
    active: StrictBool = None
    examples: ExamplesIn | None = None

    @model_validator(mode="after")
    def _no_null_where_a_value_is_needed(self):
        nulled = sorted(
            to_camel(name)
            for name in self.model_fields_set - NULLABLE
            if getattr(self, name) is None
        )
        if nulled:
            raise ValueError(f"these fields cannot be null: {', '.join(nulled)}")
        return self


def rule_fields(body: In) -> dict:
    """The snake_case fields a body sets (examples in their wire form)."""
    fields = {name: getattr(body, name) for name in body.model_fields_set}
    if "examples" in fields and fields["examples"] is not None:
        fields["examples"] = {
            "match": list(body.examples.match),
            "noMatch": list(body.examples.no_match),
        }
    return fields


class RuleOut(CamelSchema):
    id: str
    name: str
    effect: Effect
    tool_pattern: str
    agent_pattern: str
    principal_pattern: str
    conversation_id: str | None
    run_id: str | None
    conditions: list[Any]
    message: str | None
    expires_at: datetime | None
    active: bool
    created_by: str | None
    created_at: datetime
    hits: int
    last_hit_at: datetime | None
    examples: dict


def rule_resource(rule: Rule) -> dict:
    """The rule resource (snake_case keys; RuleOut maps them). select_related `created_by`."""
    return {
        "id": rule.public_id,
        "name": rule.name,
        "effect": rule.effect,
        "tool_pattern": rule.tool_pattern,
        "agent_pattern": rule.agent_pattern,
        "principal_pattern": rule.principal_pattern,
        "conversation_id": rule.conversation_external_id,
        "run_id": rule.run_external_id,
        "conditions": rule.conditions,
        "message": rule.message,
        "expires_at": rule.expires_at,
        "active": rule.active,
        "created_by": rule.created_by.external_id if rule.created_by_id else None,
        "created_at": rule.created_at,
        "hits": rule.hits,
        "last_hit_at": rule.last_hit_at,
        "examples": rule.examples or {"match": [], "noMatch": []},
    }


def rule_wire(rule: Rule) -> dict:
    """The rule resource as JSON (audit rows keep it as the wire has it)."""
    return RuleOut.model_validate(rule_resource(rule)).model_dump(by_alias=True, mode="json")


class RuleListQuery(CamelSchema):
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None


class RuleListOut(CamelSchema):
    items: list[RuleOut]
    next_cursor: str | None


class SuggestionOut(CamelSchema):
    tool_name: str
    agent_id: str
    approved: int
    denied: int
    last_decided_at: datetime
    rule: dict  # a rule body ready to POST (camelCase)


class SuggestionsOut(CamelSchema):
    items: list[SuggestionOut]


class ExplainIn(In):
    """`POST /rules/explain`: a call as it would be requested. With `runId`, the run's agent,
    principal and conversation are the call's (unless given here)."""

    tool_name: WireId
    arguments: Any = None
    agent_id: WireId | None = None
    principal_id: WireId | None = None
    run_id: RunId | None = None
    conversation_id: WireId | None = None


class ExplainedRuleOut(CamelSchema):
    id: str
    name: str
    effect: Effect
    matched: bool
    failed: str | None


class ExplainOut(CamelSchema):
    decision: Literal["approve", "deny", "ask"]
    rule_id: str | None
    rules: list[ExplainedRuleOut]


class PreviewQuery(CamelSchema):
    days: Annotated[int, Field(ge=1, le=90)] = 30


class PreviewCallOut(CamelSchema):
    approval_id: str
    run_id: str
    tool_name: str
    agent_id: str
    principal_id: str | None
    arguments: Any
    status: str
    requested_at: datetime


class PreviewOut(CamelSchema):
    days: int
    since: datetime
    decision: Effect
    count: int
    scanned: int
    truncated: bool
    calls: list[PreviewCallOut]


DEFAULTS = {
    "tool_pattern": "*",
    "agent_pattern": "*",
    "principal_pattern": "*",
    "conversation_id": None,
    "run_id": None,
    "conditions": [],
    "message": None,
    "expires_at": None,
    "active": True,
    "examples": None,
}


def rule_fields_checked(fields: dict) -> dict:
    """A whole rule's wire fields (snake_case) checked and normalized: conditions (each op, its
    value's type, dotted paths, at most 20) and the examples, which must agree with the
    conditions. Invalid (422) names each bad condition or example."""
    try:
        conditions = conditions_validate(fields.get("conditions"))
    except RuleInvalid as exc:
        raise Invalid(exc.message, code="validation_error", details=exc.details) from None
    examples = fields.get("examples")
    spec = RuleSpec(id=None, effect=fields["effect"], conditions=conditions)
    problems = examples_problems(spec, examples)
    if problems:
        first = problems[0]
        raise Invalid(
            f"{first['path']}: {first['message']}", code="validation_error", details=problems
        )
    return {**fields, "conditions": conditions, "examples": examples_normalized(examples)}


def rule_spec_unsaved(*, fields: dict, creator=None) -> RuleSpec:
    """An unsaved rule body as matching sees it (previews), checked like a save."""
    fields = rule_fields_checked({**DEFAULTS, **fields})
    return RuleSpec(
        id=None,
        effect=fields["effect"],
        tool_pattern=fields["tool_pattern"],
        agent_pattern=fields["agent_pattern"],
        principal_pattern=fields["principal_pattern"],
        conversation_id=fields["conversation_id"],
        run_id=fields["run_id"],
        conditions=fields["conditions"],
        message=fields["message"],
        expires_at=fields["expires_at"],
        active=fields["active"],
        creator_key=creator.pk if creator is not None else None,
        creator_id=creator.external_id if creator is not None else None,
    )
