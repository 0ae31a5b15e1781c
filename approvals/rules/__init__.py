"""Lasting decision rules, pure: validate conditions, compile a tenant's rules once, and
evaluate a call against them. No database and no Django here (the writes and the cache live in
approvals/services/rules.py), so every rule of matching can be tested on plain values.

A call is decided `deny` when a deny rule matches (deny beats approve), else `approve` when an
approve rule matches, else `ask` (a human decides). Among rules of the same effect the oldest
(the order they are given in) decides. A rule matches when it is active and unexpired, its tool,
agent and principal globs match (fnmatch, case-sensitive), its narrowing (one run, one
conversation) holds, every condition holds, and the run is not the own of anyone who made or
changed the rule (its authors; unless the tenant allows self-approval). Whether the authors
may still decide the call's tool is asked of the caller (`authority`: roles live in the
database), for a rule that matches otherwise. Conditions read dotted paths into the call's
arguments; an absent path or a value of the wrong type fails every op but `notExists`. No
regular expressions are ever taken from a rule (fnmatch globs only), so no rule can make
matching slow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from approvals.rules.conditions import (
    GLOB_MAGIC,
    HUMAN_ONLY_TOOLS,
    MAX_CONDITIONS,
    MAX_EXAMPLES,
    MAX_VALUE_DEPTH,
    MISSING,
    OPS,
    RuleInvalid,
    condition_compile,
    conditions_validate,
    glob_covers,
    glob_escape,
    kind,
    matcher,
    nested_deeper,
    path_parts,
    resolve,
    same,
    shown,
)

# ---- rules -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleSpec:
    """What matching needs of a stored rule (approvals.models.Rule, or an unsaved body)."""

    id: str | None
    effect: str  # approve | deny
    tool_pattern: str = "*"
    agent_pattern: str = "*"
    principal_pattern: str = "*"
    conversation_id: str | None = None
    run_id: str | None = None
    conditions: list = field(default_factory=list)
    message: str | None = None
    expires_at: datetime | None = None
    active: bool = True
    creator_key: Any = None  # the creator principal's identity (its database id)
    creator_id: str | None = None  # its wire id, for the reasons
    # Every other principal who changed it since, as (identity, wire id): the rule is theirs
    # too (four-eyes: it never decides their own runs either).
    editors: tuple = ()
    source: Any = field(default=None, compare=False)  # what it was made from (a stored Rule)


@dataclass(frozen=True)
class Call:
    """A requested call as rules see it. `principal_key` is compared with a rule's creator
    (self-approval); `principal_id` (the wire id, None for a run for no principal) with its
    principal glob; `conversation_id` is needed only when a rule narrows to one
    (RuleSet.needs_conversation)."""

    tool_name: str
    arguments: Any = None
    agent_id: str = ""
    principal_id: str | None = None
    principal_key: Any = None
    run_id: str | None = None
    conversation_id: str | None = None


class CompiledRule:
    """A rule with its globs and conditions compiled once."""

    __slots__ = (
        "spec",
        "_tool",
        "_agent",
        "_principal",
        "_checks",
        "match_all_principals",
        "authors",
    )

    def __init__(self, spec: RuleSpec):
        self.spec = spec
        # whom the rule speaks for: its creator and every editor, identity -> wire id
        self.authors = {key: wire for key, wire in spec.editors if key is not None}
        if spec.creator_key is not None:
            self.authors[spec.creator_key] = spec.creator_id
        self._tool = matcher(spec.tool_pattern)
        self._agent = matcher(spec.agent_pattern)
        self._principal = matcher(spec.principal_pattern)
        self.match_all_principals = spec.principal_pattern == "*"
        self._checks = [condition_compile(i, c) for i, c in enumerate(spec.conditions)]

    @property
    def id(self):
        return self.spec.id

    @property
    def effect(self) -> str:
        return self.spec.effect

    def tool_matches(self, tool_name: str) -> bool:
        return bool(self._tool(tool_name))

    def covers(self, tool_name: str, agent_id: str, *, now: datetime) -> bool:
        """Does this rule speak for every call of this tool by this agent, whatever else the
        call says (active, unexpired, both globs match, narrowed to no run or conversation)?
        Conditions and the principal glob may still leave some calls to people."""
        spec = self.spec
        return (
            spec.active
            and (spec.expires_at is None or spec.expires_at > now)
            and spec.run_id is None
            and spec.conversation_id is None
            and bool(self._tool(tool_name))
            and bool(self._agent(agent_id))
        )

    def conditions_failure(self, arguments) -> str | None:
        """Why the conditions do not all hold for these arguments (None: they do)."""
        for check in self._checks:
            why = check(arguments)
            if why is not None:
                return why
        return None

    def failure(self, call: Call, *, now: datetime, allow_self_approval: bool) -> str | None:
        """Why this rule does not match the call (None: it matches). Cheapest checks first."""
        spec = self.spec
        if not spec.active:
            return "active: the rule is inactive"
        if spec.expires_at is not None and spec.expires_at <= now:
            return f"expiresAt: the rule expired at {spec.expires_at.isoformat()}"
        if call.tool_name in HUMAN_ONLY_TOOLS:
            return f"toolName: {shown(call.tool_name)} is decided by people only"
        if not self._tool(call.tool_name):
            return f"toolPattern: {shown(call.tool_name)} does not match {shown(spec.tool_pattern)}"
        if spec.run_id is not None and call.run_id != spec.run_id:
            return f"runId: the call is not of run {shown(spec.run_id)}"
        if spec.conversation_id is not None and call.conversation_id != spec.conversation_id:
            return f"conversationId: the call is not in conversation {shown(spec.conversation_id)}"
        if not self._agent(call.agent_id or ""):
            return (
                f"agentPattern: {shown(call.agent_id or '')} does not match "
                f"{shown(spec.agent_pattern)}"
            )
        if not self.match_all_principals:
            if call.principal_id is None:
                return "principalPattern: the run is for no principal"
            if not self._principal(call.principal_id):
                return (
                    f"principalPattern: {shown(call.principal_id)} does not match "
                    f"{shown(spec.principal_pattern)}"
                )
        if (
            not allow_self_approval
            and call.principal_key is not None
            and call.principal_key in self.authors
        ):
            if call.principal_key == spec.creator_key:
                who = shown(spec.creator_id) if spec.creator_id else "its creator"
                return (
                    f"createdBy: the run is for {who}, who made this rule "
                    "(this tenant does not allow self-approval)"
                )
            who = shown(self.authors[call.principal_key] or "an editor")
            return (
                f"editedBy: the run is for {who}, who changed this rule "
                "(this tenant does not allow self-approval)"
            )
        return self.conditions_failure(call.arguments)


@dataclass(frozen=True)
class Explained:
    """One rule's answer for one call: `matched`, and why it does not decide (`failed`)."""

    rule: CompiledRule
    matched: bool
    failed: str | None


@dataclass(frozen=True)
class Outcome:
    decision: str  # approve | deny | ask
    rule: CompiledRule | None = None
    rules: tuple[Explained, ...] = ()

    @property
    def rule_id(self):
        return self.rule.id if self.rule is not None else None


ASK = Outcome("ask")
# (rule, tool name) -> why its authors may not decide that tool now, or None
Authority = Callable[[CompiledRule, str], "str | None"] | None
MEMO_TOOLS = 4096  # tool names whose candidate rules are remembered per RuleSet


class RuleSet:
    """A tenant's rules compiled once. `decide` is the hot path (ingest): the rules whose tool
    glob matches a tool name are found once per tool name and remembered, deny rules are
    tried first, and the first match decides. `explain` says, for every rule whose tool glob
    matches, whether it matches and why not."""

    def __init__(self, specs: Iterable[RuleSpec], *, allow_self_approval: bool = False):
        self.rules = [CompiledRule(s) for s in specs]
        self.allow_self_approval = allow_self_approval
        self.needs_conversation = any(r.spec.conversation_id is not None for r in self.rules)
        self.needs_principal_id = any(not r.match_all_principals for r in self.rules)
        self._literal: dict[str, list[CompiledRule]] = {}
        self._globbed: list[CompiledRule] = []
        for rule in self.rules:
            if GLOB_MAGIC.search(rule.spec.tool_pattern):
                self._globbed.append(rule)
            else:
                self._literal.setdefault(rule.spec.tool_pattern, []).append(rule)
        self._order = {id(r): i for i, r in enumerate(self.rules)}
        self._memo: dict[str, tuple[list[CompiledRule], list[CompiledRule]]] = {}
        # everyone who made or changed some rule (whose rights `authority` asks about)
        self.author_keys = frozenset(key for r in self.rules for key in r.authors)

    def __len__(self) -> int:
        return len(self.rules)

    def candidates(self, tool_name: str) -> list[CompiledRule]:
        """The rules whose tool glob matches, oldest first."""
        found = self._literal.get(tool_name, []) + [
            r for r in self._globbed if r.tool_matches(tool_name)
        ]
        return sorted(found, key=lambda r: self._order[id(r)])

    def _split(self, tool_name: str) -> tuple[list[CompiledRule], list[CompiledRule]]:
        split = self._memo.get(tool_name)
        if split is None:
            found = self.candidates(tool_name)
            split = (
                [r for r in found if r.effect == "deny"],
                [r for r in found if r.effect == "approve"],
            )
            if len(self._memo) >= MEMO_TOOLS:
                self._memo.clear()
            self._memo[tool_name] = split
        return split

    def decide(
        self, call: Call, *, now: datetime, allow_self_approval=None, authority: Authority = None
    ) -> Outcome:
        """approve, deny or ask, and the deciding rule (no explanations: the hot path).
        `allow_self_approval`: the tenant's setting now (default: the one compiled with).
        `authority(rule, tool_name)`: why the rule's authors may not decide this tool now (None:
        they may), asked only of a rule that matches otherwise; one they may not is passed over
        like one that does not match."""
        if not self.rules or call.tool_name in HUMAN_ONLY_TOOLS:
            return ASK
        allow = self.allow_self_approval if allow_self_approval is None else allow_self_approval
        for group in self._split(call.tool_name):
            for rule in group:
                if rule.failure(call, now=now, allow_self_approval=allow) is None and (
                    authority is None or authority(rule, call.tool_name) is None
                ):
                    return Outcome(rule.effect, rule)
        return ASK

    def explain(self, call: Call, *, now: datetime, authority: Authority = None) -> Outcome:
        """`decide`, with every rule whose tool glob matches (oldest first): matched, and why
        it does not decide (its first failing check, or the rule that decides instead)."""

        def failure(rule: CompiledRule) -> str | None:
            why = rule.failure(call, now=now, allow_self_approval=self.allow_self_approval)
            if why is None and authority is not None:
                why = authority(rule, call.tool_name)
            return why

        checked = [(r, failure(r)) for r in self.candidates(call.tool_name)]
        matched = [r for r, why in checked if why is None]
        winner = next((r for r in matched if r.effect == "deny"), None) or next(iter(matched), None)
        explained = []
        for rule, why in checked:
            if why is None and winner is not None and rule is not winner:
                why = (
                    f"a deny rule ({winner.id}) wins over approve rules"
                    if winner.effect == "deny" and rule.effect == "approve"
                    else f"an older rule ({winner.id}) decides first"
                )
            explained.append(Explained(rule, rule in matched, why))
        if winner is None:
            return Outcome("ask", None, tuple(explained))
        return Outcome(winner.effect, winner, tuple(explained))


def examples_problems(spec: RuleSpec, examples) -> list[dict]:
    """Saved examples must agree with the rule's conditions: each `match` arguments value makes
    every condition hold, each `noMatch` one fails one. Problems name the example."""
    if examples is None:
        return []
    if not isinstance(examples, dict):
        return [{"path": "examples", "message": f"an object, not {kind(examples)}"}]
    problems = []
    unknown = sorted(set(examples) - {"match", "noMatch"})
    if unknown:
        problems.append({"path": "examples", "message": f"unknown fields: {', '.join(unknown)}"})
    rule = CompiledRule(spec)
    for name, should_match in (("match", True), ("noMatch", False)):
        items = examples.get(name) or []
        if not isinstance(items, list):
            problems.append({"path": f"examples.{name}", "message": "a list of arguments"})
            continue
        if len(items) > MAX_EXAMPLES:
            problems.append(
                {"path": f"examples.{name}", "message": f"at most {MAX_EXAMPLES} examples"}
            )
            continue
        for i, arguments in enumerate(items):
            if nested_deeper(arguments):
                message = f"arguments nest lists and objects at most {MAX_VALUE_DEPTH} deep"
                problems.append({"path": f"examples.{name}.{i}", "message": message})
                continue
            why = rule.conditions_failure(arguments)
            if should_match and why is not None:
                problems.append(
                    {"path": f"examples.{name}.{i}", "message": f"the rule does not match: {why}"}
                )
            elif not should_match and why is None:
                problems.append(
                    {
                        "path": f"examples.{name}.{i}",
                        "message": "the rule matches it, but it is listed under noMatch",
                    }
                )
    return problems


def examples_normalized(examples) -> dict:
    examples = examples or {}
    return {
        "match": list(examples.get("match") or []),
        "noMatch": list(examples.get("noMatch") or []),
    }


# Re-exported: the services, schemas and tests read the conditions' names through here.
__all__ = [
    "HUMAN_ONLY_TOOLS",
    "MAX_CONDITIONS",
    "MISSING",
    "OPS",
    "RuleInvalid",
    "conditions_validate",
    "glob_covers",
    "glob_escape",
    "path_parts",
    "resolve",
    "same",
]
