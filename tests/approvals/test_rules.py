"""approvals/rules.py, pure: every op family (absent paths, wrong types, bools are not numbers,
nested lists), validation naming the condition, precedence, self-approval, expiry, narrowing,
globs, examples. No database."""

from datetime import UTC, datetime, timedelta

import pytest

from approvals.rules import (
    MAX_CONDITIONS,
    Call,
    CompiledRule,
    RuleInvalid,
    RuleSet,
    RuleSpec,
    conditions_validate,
    examples_problems,
    glob_escape,
    path_parts,
    resolve,
    same,
)
from approvals.rules.generalise import argument_choices, conditions_from_choices

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def holds(op, value=None, arguments=None, path="x", **extra):
    """None when the one condition holds for the arguments, else the failure reason."""
    condition = {
        "path": path,
        "op": op,
        **({} if op in ("exists", "notExists") else {"value": value}),
    }
    conditions_validate([condition])  # every condition used below is a valid one
    rule = CompiledRule(RuleSpec(id="rul_t", effect="approve", conditions=[condition]))
    return rule.conditions_failure(arguments)


# ---- paths ----


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("to", True),
        ("recipients.0", True),
        ("options.dryRun", True),
        ("a-b.c_d.$e", True),
        ("", False),
        (".to", False),
        ("to.", False),
        ("a..b", False),
        ("a b", False),
        ("a.\tb", False),
        (None, False),
        (3, False),
        ("x" * 257, False),
        (".".join(["a"] * 33), False),
    ],
)
def test_only_dotted_paths_are_paths(path, ok):
    assert (path_parts(path) is not None) is ok


def test_an_integer_part_indexes_a_list_and_is_a_key_of_an_object():
    args = {"to": [{"addr": "a@x"}, {"addr": "b@x"}], "map": {"0": "zero"}}
    assert resolve(args, path_parts("to.1.addr")) == "b@x"
    assert resolve(args, path_parts("map.0")) == "zero"
    from approvals.rules import MISSING

    assert resolve(args, path_parts("to.2.addr")) is MISSING  # out of range
    assert resolve(args, path_parts("to.addr")) is MISSING  # a list has no keys
    assert resolve(args, path_parts("to.-1")) is MISSING  # no negative indexes
    assert resolve(args, path_parts("to.01")) is MISSING  # not an integer part
    assert resolve("a string", path_parts("x")) is MISSING
    assert resolve(None, path_parts("x")) is MISSING


# ---- equality ----


def test_json_equality_keeps_bools_apart_from_numbers():
    assert same(1, 1.0)
    assert not same(True, 1)
    assert not same(0, False)
    assert not same("1", 1)
    assert same({"a": [1, {"b": True}]}, {"a": [1.0, {"b": True}]})
    assert not same({"a": [1, {"b": True}]}, {"a": [1, {"b": 1}]})
    assert not same([1, 2], [2, 1])
    assert same(None, None)
    assert not same(None, 0)


def test_equals_and_not_equals():
    assert holds("equals", "a@acme.com", {"x": "a@acme.com"}) is None
    assert holds("equals", 5, {"x": 5.0}) is None
    assert holds("equals", True, {"x": 1}) == "conditions.0: 'x' does not equal true"
    assert holds("equals", None, {"x": None}) is None  # an explicit null is present
    assert holds("equals", {"a": [1]}, {"x": {"a": [1]}}) is None
    assert holds("equals", "a", {}) == "conditions.0: 'x' is absent"
    assert holds("notEquals", "a", {"x": "b"}) is None
    assert holds("notEquals", 1, {"x": True}) is None  # true is not 1
    assert holds("notEquals", "a", {"x": "a"}) == "conditions.0: 'x' equals 'a'"
    assert holds("notEquals", "a", {}) == "conditions.0: 'x' is absent"  # absent fails it too


def test_in():
    assert holds("in", ["a", "b"], {"x": "b"}) is None
    assert holds("in", [1, 2], {"x": 2.0}) is None
    assert holds("in", [1, 2], {"x": True}) == "conditions.0: 'x' is not in [1, 2]"
    assert holds("in", [], {"x": "a"}) is not None
    assert holds("in", ["a"], {"y": "a"}) == "conditions.0: 'x' is absent"


def test_starts_with_ends_with_and_glob_need_strings():
    assert holds("endsWith", "@acme.com", {"to": "bob@acme.com"}, path="to") is None
    assert (
        holds("endsWith", "@acme.com", {"to": "bob@evil.com"}, path="to")
        == "conditions.0: 'to' does not end with '@acme.com'"
    )
    assert holds("startsWith", "/srv/", {"x": "/srv/a"}) is None
    assert holds("startsWith", "/srv/", {"x": "/etc/a"}) == (
        "conditions.0: 'x' does not start with '/srv/'"
    )
    assert holds("startsWith", "1", {"x": 12}) == "conditions.0: 'x' is a number, not a string"
    assert holds("endsWith", "e", {"x": True}) == "conditions.0: 'x' is a boolean, not a string"
    assert holds("endsWith", "e", {"x": ["e"]}) == "conditions.0: 'x' is a list, not a string"
    assert holds("glob", "*.acme.com", {"x": "mail.acme.com"}) is None
    assert holds("glob", "*.acme.com", {"x": "mail.ACME.com"}) is not None  # case-sensitive
    assert holds("glob", "report-?.pdf", {"x": "report-1.pdf"}) is None
    assert holds("glob", "[ab]*", {"x": "c"}) == "conditions.0: 'x' does not match '[ab]*'"
    assert holds("glob", "*", {"x": None}) == "conditions.0: 'x' is null, not a string"
    assert holds("glob", "*", {}) == "conditions.0: 'x' is absent"


def test_contains_is_a_substring_of_a_string_and_an_element_of_a_list():
    assert holds("contains", "acme", {"x": "bob@acme.com"}) is None
    assert holds("contains", "evil", {"x": "bob@acme.com"}) == (
        "conditions.0: 'x' does not contain 'evil'"
    )
    assert holds("contains", "a@x", {"x": ["a@x", "b@x"]}) is None
    assert holds("contains", "a", {"x": ["abc"]}) is not None  # an element, not a substring
    assert holds("contains", 1, {"x": [True]}) is not None  # true is not 1
    assert holds("contains", [1], {"x": [[1], [2]]}) is None  # nested lists
    assert holds("contains", {"id": 2}, {"x": [{"id": 1}, {"id": 2}]}) is None
    assert holds("contains", 1, {"x": "1"}) == "conditions.0: 'x' is a string, not a list"
    assert holds("contains", "a", {"x": {"a": 1}}) == (
        "conditions.0: 'x' is an object, not a string or a list"
    )
    assert holds("contains", "a", {}) == "conditions.0: 'x' is absent"


def test_number_comparisons_take_numbers_only():
    assert holds("lt", 100, {"amount": 99.5}, path="amount") is None
    assert holds("lt", 100, {"amount": 100}, path="amount") == (
        "conditions.0: 'amount' is not less than 100"
    )
    assert holds("lte", 100, {"x": 100}) is None
    assert holds("gt", 0, {"x": 1}) is None
    assert holds("gt", 0, {"x": 0}) == "conditions.0: 'x' is not greater than 0"
    assert holds("gte", 1.5, {"x": 1.5}) is None
    assert holds("gte", 2, {"x": 1}) == "conditions.0: 'x' is not at least 2"
    assert holds("lt", 100, {"x": "5"}) == "conditions.0: 'x' is a string, not a number"
    assert holds("lt", 2, {"x": True}) == "conditions.0: 'x' is a boolean, not a number"
    assert holds("gt", -1, {"x": False}) == "conditions.0: 'x' is a boolean, not a number"
    assert holds("lt", 100, {"x": None}) == "conditions.0: 'x' is null, not a number"
    assert holds("lt", 100, {}) == "conditions.0: 'x' is absent"


def test_exists_and_not_exists():
    assert holds("exists", arguments={"x": None}) is None  # present, even as null
    assert holds("exists", arguments={}) == "conditions.0: 'x' is absent"
    assert holds("notExists", arguments={}) is None  # the one op an absent path passes
    assert holds("notExists", arguments="not an object") is None
    assert holds("notExists", arguments={"x": False}) == "conditions.0: 'x' exists"


def test_nested_paths_through_lists_and_objects():
    args = {"message": {"recipients": [{"to": "a@acme.com"}, {"to": "b@evil.com"}]}}
    assert holds("endsWith", "@acme.com", args, path="message.recipients.0.to") is None
    assert holds("endsWith", "@acme.com", args, path="message.recipients.1.to") is not None
    assert holds("exists", arguments=args, path="message.recipients.2") is not None
    assert holds("notExists", arguments=args, path="message.recipients.2") is None


# ---- validation names the condition ----


@pytest.mark.parametrize(
    ("condition", "path", "words"),
    [
        ({"path": "to", "op": "matches", "value": ".*"}, "conditions.0.op", "unknown op 'matches'"),
        ({"path": "to", "op": "regex", "value": ".*"}, "conditions.0.op", "unknown op"),
        ({"path": "to..x", "op": "exists"}, "conditions.0.path", "not a dotted path"),
        ({"path": "", "op": "exists"}, "conditions.0.path", "not a dotted path"),
        ({"op": "exists"}, "conditions.0.path", "not a dotted path"),
        ({"path": "a", "op": "lt", "value": "5"}, "conditions.0.value", "needs a number value"),
        ({"path": "a", "op": "lt", "value": True}, "conditions.0.value", "not a boolean"),
        ({"path": "a", "op": "in", "value": "ab"}, "conditions.0.value", "needs a list value"),
        ({"path": "a", "op": "endsWith", "value": 3}, "conditions.0.value", "a string value"),
        ({"path": "a", "op": "glob", "value": None}, "conditions.0.value", "a string value"),
        ({"path": "a", "op": "equals"}, "conditions.0.value", "needs a value"),
        ({"path": "a", "op": "exists", "value": 1}, "conditions.0.value", "takes no value"),
        ({"path": "a", "op": "exists", "vlaue": 1}, "conditions.0", "unknown fields: vlaue"),
        ("to == x", "conditions.0", "a condition is an object"),
    ],
)
def test_a_bad_condition_is_named(condition, path, words):
    ok = {"path": "to", "op": "exists"}
    with pytest.raises(RuleInvalid) as err:
        conditions_validate([ok, condition])
    detail = err.value.details[0]
    assert detail["path"] == path.replace("conditions.0", "conditions.1")
    assert words in detail["message"]


def test_at_most_twenty_conditions():
    twenty = [{"path": f"a{i}", "op": "exists"} for i in range(MAX_CONDITIONS)]
    assert len(conditions_validate(twenty)) == MAX_CONDITIONS
    with pytest.raises(RuleInvalid) as err:
        conditions_validate([*twenty, {"path": "b", "op": "exists"}])
    assert err.value.details[0]["path"] == "conditions.20"
    assert "at most 20" in err.value.message


def test_exists_with_a_null_value_is_stored_without_one():
    assert conditions_validate([{"path": "a", "op": "exists", "value": None}]) == [
        {"path": "a", "op": "exists"}
    ]


# ---- rules and rule sets ----


def spec(effect="approve", **kw):
    kw.setdefault("id", f"rul_{effect}_{len(kw)}")
    return RuleSpec(effect=effect, **kw)


def call(**kw):
    kw.setdefault("tool_name", "email.send")
    kw.setdefault("arguments", {"to": "bob@acme.com"})
    kw.setdefault("agent_id", "support-bot")
    kw.setdefault("principal_id", "alice")
    kw.setdefault("principal_key", 1)
    kw.setdefault("run_id", "run_1")
    return Call(**kw)


INTERNAL = [{"path": "to", "op": "endsWith", "value": "@acme.com"}]


def test_no_rule_asks_a_human():
    outcome = RuleSet([]).decide(call(), now=NOW)
    assert outcome.decision == "ask" and outcome.rule is None


def test_deny_beats_approve_whatever_the_order():
    approve = spec("approve", id="rul_a", tool_pattern="email.*", conditions=INTERNAL)
    deny = spec("deny", id="rul_d", tool_pattern="*", conditions=[
        {"path": "to", "op": "contains", "value": "bob"}])  # fmt: skip
    for rules in ([approve, deny], [deny, approve]):
        outcome = RuleSet(rules).decide(call(), now=NOW)
        assert (outcome.decision, outcome.rule_id) == ("deny", "rul_d")
    explained = RuleSet([approve, deny]).explain(call(), now=NOW)
    assert explained.decision == "deny" and explained.rule_id == "rul_d"
    why = {e.rule.id: (e.matched, e.failed) for e in explained.rules}
    assert why == {
        "rul_a": (True, "a deny rule (rul_d) wins over approve rules"),
        "rul_d": (True, None),
    }


def test_the_oldest_of_two_matching_rules_of_one_effect_decides():
    first = spec(id="rul_1", tool_pattern="email.send")
    second = spec(id="rul_2", tool_pattern="email.*")
    assert RuleSet([first, second]).decide(call(), now=NOW).rule_id == "rul_1"
    assert RuleSet([second, first]).decide(call(), now=NOW).rule_id == "rul_2"


def test_globs_are_case_sensitive_fnmatch():
    rules = RuleSet([spec(id="rul_g", tool_pattern="email.*", agent_pattern="support-?ot")])
    assert rules.decide(call(), now=NOW).decision == "approve"
    assert rules.decide(call(tool_name="Email.send"), now=NOW).decision == "ask"
    assert rules.decide(call(agent_id="support-bots"), now=NOW).decision == "ask"
    literal = RuleSet([spec(id="rul_l", tool_pattern=glob_escape("odd*[name]?"))])
    assert literal.decide(call(tool_name="odd*[name]?"), now=NOW).decision == "approve"
    assert literal.decide(call(tool_name="odd-x[name]!"), now=NOW).decision == "ask"


def test_principal_glob_and_a_run_for_no_principal():
    rules = RuleSet([spec(id="rul_p", principal_pattern="*@acme.com")])
    assert rules.decide(call(principal_id="a@acme.com"), now=NOW).decision == "approve"
    assert rules.decide(call(principal_id="a@evil.com"), now=NOW).decision == "ask"
    nobody = call(principal_id=None, principal_key=None)
    assert rules.decide(nobody, now=NOW).decision == "ask"
    assert RuleSet([spec(id="rul_any")]).decide(nobody, now=NOW).decision == "approve"
    reason = rules.explain(nobody, now=NOW).rules[0].failed
    assert reason == "principalPattern: the run is for no principal"


def test_a_rule_never_decides_its_creators_own_runs_unless_self_approval_is_allowed():
    mine = spec("deny", id="rul_m", creator_key=1, creator_id="alice")
    assert RuleSet([mine]).decide(call(principal_key=1), now=NOW).decision == "ask"
    assert RuleSet([mine]).decide(call(principal_key=2), now=NOW).decision == "deny"
    allowed = RuleSet([mine], allow_self_approval=True)
    assert allowed.decide(call(principal_key=1), now=NOW).decision == "deny"
    failed = RuleSet([mine]).explain(call(principal_key=1), now=NOW).rules[0].failed
    assert failed.startswith("createdBy: the run is for 'alice', who made this rule")
    # and an approve rule of someone else still decides the creator's call
    other = spec(id="rul_o", creator_key=2)
    assert RuleSet([mine, other]).decide(call(principal_key=1), now=NOW).rule_id == "rul_o"


def test_expired_and_inactive_rules_do_nothing():
    expired = spec("deny", id="rul_x", expires_at=NOW - timedelta(seconds=1))
    at_expiry = spec("deny", id="rul_y", expires_at=NOW)
    later = spec("deny", id="rul_z", expires_at=NOW + timedelta(seconds=1))
    inactive = spec("deny", id="rul_i", active=False)
    assert RuleSet([expired, at_expiry, inactive]).decide(call(), now=NOW).decision == "ask"
    assert RuleSet([expired, later]).decide(call(), now=NOW).rule_id == "rul_z"
    why = {e.rule.id: e.failed for e in RuleSet([expired, inactive]).explain(call(), now=NOW).rules}
    assert why["rul_x"].startswith("expiresAt: the rule expired at 2026-12-02T11:59:59")
    assert why["rul_i"] == "active: the rule is inactive"


def test_narrowing_to_one_run_or_one_conversation():
    run_rule = spec(id="rul_r", run_id="run_1")
    conv_rule = spec(id="rul_c", conversation_id="conv_9")
    assert RuleSet([run_rule]).decide(call(run_id="run_1"), now=NOW).decision == "approve"
    assert RuleSet([run_rule]).decide(call(run_id="run_2"), now=NOW).decision == "ask"
    rules = RuleSet([conv_rule])
    assert rules.needs_conversation
    assert rules.decide(call(conversation_id="conv_9"), now=NOW).decision == "approve"
    assert rules.decide(call(conversation_id="conv_8"), now=NOW).decision == "ask"
    assert rules.decide(call(conversation_id=None), now=NOW).decision == "ask"
    why = rules.explain(call(), now=NOW).rules[0].failed
    assert why == "conversationId: the call is not in conversation 'conv_9'"
    assert not RuleSet([run_rule]).needs_conversation


def test_a_budget_override_is_never_decided_by_a_rule():
    rules = RuleSet([spec(id="rul_all", tool_pattern="*")])
    assert rules.decide(call(tool_name="budget.override"), now=NOW).decision == "ask"
    assert rules.explain(call(tool_name="budget.override"), now=NOW).rules[0].failed == (
        "toolName: 'budget.override' is decided by people only"
    )


def test_explain_lists_every_rule_whose_tool_glob_matches_with_why_not():
    rules = RuleSet(
        [
            spec(id="rul_1", tool_pattern="email.*", conditions=INTERNAL),
            spec(id="rul_2", tool_pattern="email.send", agent_pattern="sales-*"),
            spec(id="rul_3", tool_pattern="files.*"),
        ]
    )
    outcome = rules.explain(call(arguments={"to": "eve@evil.com"}), now=NOW)
    assert outcome.decision == "ask" and outcome.rule is None
    assert [(e.rule.id, e.matched, e.failed) for e in outcome.rules] == [
        ("rul_1", False, "conditions.0: 'to' does not end with '@acme.com'"),
        ("rul_2", False, "agentPattern: 'support-bot' does not match 'sales-*'"),
    ]


def test_many_rules_find_their_candidates_by_tool_name_once():
    specs = [spec(id=f"rul_{i}", tool_pattern=f"tool.{i}") for i in range(500)]
    specs.append(spec("deny", id="rul_glob", tool_pattern="tool.4*", conditions=INTERNAL))
    rules = RuleSet(specs)
    assert [r.id for r in rules.candidates("tool.42")] == ["rul_42", "rul_glob"]
    assert rules.decide(call(tool_name="tool.42"), now=NOW).decision == "deny"
    assert rules.decide(call(tool_name="tool.42", arguments={"to": "x@y"}), now=NOW).rule_id == (
        "rul_42"
    )
    assert rules.decide(call(tool_name="other"), now=NOW).decision == "ask"


def test_examples_must_agree_with_the_conditions():
    rule = spec(id=None, conditions=INTERNAL)
    ok = {"match": [{"to": "a@acme.com"}], "noMatch": [{"to": "a@evil.com"}, {}]}
    assert examples_problems(rule, ok) == []
    bad = {"match": [{"to": "a@acme.com"}, {"to": "b@evil.com"}], "noMatch": [{"to": "c@acme.com"}]}
    problems = examples_problems(rule, bad)
    assert [p["path"] for p in problems] == ["examples.match.1", "examples.noMatch.0"]
    assert "does not end with '@acme.com'" in problems[0]["message"]
    assert examples_problems(rule, {"match": "x"})[0]["path"] == "examples.match"
    assert examples_problems(rule, {"maybe": []})[0]["message"] == "unknown fields: maybe"


def test_a_card_rule_generalises_each_argument():
    args = {
        "to": "dana@acme.com",
        "path": "/srv/reports/2026/q4.csv",
        "url": "https://docs.example.org/a/b?c=1",
        "amount": 4200,
        "subject": "Outage summary",
        "body": "x" * 400,
        "cc": ["b"],
        "dry": True,
        "a.b": 1,
    }
    items = {i["key"]: i for i in argument_choices(args)}
    assert set(items) == {"to", "path", "url", "amount", "subject", "body", "cc", "dry"}
    assert items["to"]["suggested"]["op"] == "endsWith"
    assert items["to"]["suggested"]["value"] == "@acme.com"
    assert items["path"]["suggested"]["value"] == "/srv/reports/2026/"
    assert items["url"]["suggested"]["value"] == "https://docs.example.org/"
    assert items["amount"]["suggested"] == {"op": "lte", "value": 4200, "label": "at most 4200"}
    assert items["subject"]["suggested"] is None and items["subject"]["default"] == "exact"
    assert items["body"]["default"] == "any"  # a long text is never "calls like this"
    assert items["cc"]["default"] == "any" and items["dry"]["default"] == "exact"
    conditions = conditions_from_choices(
        args, {"to": "suggested", "amount": "exact", "path": "any"}
    )
    assert conditions == [
        {"path": "to", "op": "endsWith", "value": "@acme.com"},
        {"path": "url", "op": "startsWith", "value": "https://docs.example.org/"},
        {"path": "amount", "op": "equals", "value": 4200},
        {"path": "subject", "op": "equals", "value": "Outage summary"},
        {"path": "dry", "op": "equals", "value": True},
    ]
    # Every suggested condition is one the rules accept and that matches the call it came from.
    for item in items.values():
        if item["suggested"]:
            cond = {
                "path": item["key"],
                "op": item["suggested"]["op"],
                "value": item["suggested"]["value"],
            }
            assert conditions_validate([cond]) == [cond]
    assert argument_choices(["not", "an", "object"]) == []
