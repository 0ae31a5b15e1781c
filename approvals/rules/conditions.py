"""Rule conditions, pure: values, dotted paths into a call's arguments, and each condition
validated and compiled to a small check (approvals/rules/__init__.py puts them in rules)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from fnmatch import fnmatchcase, translate
from typing import Any

MAX_CONDITIONS = 20
MAX_PATH_CHARS = 256
MAX_PATH_PARTS = 32
MAX_TEXT_CHARS = 1000  # a string value (startsWith, glob...)
MAX_IN_VALUES = 1000
MAX_EXAMPLES = 20  # per list (match, noMatch)
MAX_VALUE_DEPTH = 32  # lists and objects inside one another in a value or an example
# Calls only people decide: a budget override is its leads' (contract: "not by tool globs").
HUMAN_ONLY_TOOLS = frozenset({"budget.override"})

OPS = (
    "equals",
    "notEquals",
    "in",
    "startsWith",
    "endsWith",
    "contains",
    "glob",
    "lt",
    "lte",
    "gt",
    "gte",
    "exists",
    "notExists",
)
_STRING_OPS = {"startsWith", "endsWith", "glob"}
_NUMBER_OPS = {"lt", "lte", "gt", "gte"}
_NO_VALUE_OPS = {"exists", "notExists"}
_PART = re.compile(r"[^.\s]+")
_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")
GLOB_MAGIC = re.compile(r"[*?\[]")
MISSING = object()


class RuleInvalid(ValueError):
    """A rule body that cannot be saved: `details` lists each problem as {path, message}, the
    path naming the condition (`conditions.3.op`) or the example (`examples.match.0`)."""

    def __init__(self, message: str, details: list[dict]):
        super().__init__(message)
        self.message = message
        self.details = details


# ---- values ----------------------------------------------------------------------------------


def is_number(value) -> bool:
    """JSON numbers only: a bool is not a number (Python's True == 1 is not JSON's)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def same(a, b) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, "1" is not 1, objects by keys, lists in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a is None and b is None


def kind(value) -> str:
    """A value's JSON type, as the failure reasons name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if is_number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def nested_deeper(value, limit: int = MAX_VALUE_DEPTH) -> bool:
    """Whether lists and objects sit more than `limit` deep in `value` (walked without
    recursion: a value nested thousands deep is an answer, not a RecursionError)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | dict):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def shown(value, limit: int = 80) -> str:
    """A value in a failure reason: strings in single quotes, anything else as JSON."""
    if isinstance(value, str):
        text = "'" + value + "'"
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def glob_escape(text: str) -> str:
    """A glob that matches exactly `text` (its `*`, `?` and `[` made literal)."""
    return GLOB_MAGIC.sub(lambda m: "[" + m.group(0) + "]", text)


# ---- paths -----------------------------------------------------------------------------------


def path_parts(path) -> tuple[tuple[str, int | None], ...] | None:
    """A dotted path as its parts (each with its list index when it is an integer), or None
    when it is not a dotted path: parts of one or more characters other than `.` and
    whitespace, joined by `.`."""
    if not isinstance(path, str) or not 0 < len(path) <= MAX_PATH_CHARS:
        return None
    parts = path.split(".")
    if len(parts) > MAX_PATH_PARTS or not all(_PART.fullmatch(p) for p in parts):
        return None
    return tuple((p, int(p) if _INDEX.fullmatch(p) else None) for p in parts)


def resolve(arguments, parts) -> Any:
    """The value at a path in the arguments, or MISSING. An integer part indexes a list (and is
    a key of an object); anything else is absent."""
    value = arguments
    for key, index in parts:
        if isinstance(value, dict):
            if key not in value:
                return MISSING
            value = value[key]
        elif isinstance(value, list) and index is not None and index < len(value):
            value = value[index]
        else:
            return MISSING
    return value


# ---- conditions: validation --------------------------------------------------------------------


def _value_problem(op: str, condition: dict) -> str | None:
    has_value = "value" in condition
    value = condition.get("value")
    if op in _NO_VALUE_OPS:
        return None if value is None else f"'{op}' takes no value"
    if not has_value:
        return f"'{op}' needs a value"
    if nested_deeper(value):
        return f"a value nests lists and objects at most {MAX_VALUE_DEPTH} deep"
    if op in _STRING_OPS and not isinstance(value, str):
        return f"'{op}' needs a string value, not {kind(value)}"
    if op in _STRING_OPS and len(value) > MAX_TEXT_CHARS:
        return f"'{op}' takes at most {MAX_TEXT_CHARS} characters"
    if op in _NUMBER_OPS and not (is_number(value) and math.isfinite(value)):
        return f"'{op}' needs a number value, not {kind(value)}"
    if op == "in" and not isinstance(value, list):
        return f"'in' needs a list value, not {kind(value)}"
    if op == "in" and len(value) > MAX_IN_VALUES:
        return f"'in' takes at most {MAX_IN_VALUES} values"
    return None


def condition_problems(index: int, condition) -> list[dict]:
    """What is wrong with one condition, each as {path, message} naming it."""
    where = f"conditions.{index}"
    if not isinstance(condition, dict):
        return [{"path": where, "message": f"a condition is an object, not {kind(condition)}"}]
    problems = []
    unknown = sorted(set(condition) - {"path", "op", "value"})
    if unknown:
        problems.append({"path": where, "message": f"unknown fields: {', '.join(unknown)}"})
    if path_parts(condition.get("path")) is None:
        problems.append(
            {
                "path": f"{where}.path",
                "message": f"{shown(condition.get('path'))} is not a dotted path "
                "(e.g. 'to', 'recipients.0', 'options.dryRun')",
            }
        )
    op = condition.get("op")
    if op not in OPS:
        problems.append(
            {
                "path": f"{where}.op",
                "message": f"unknown op {shown(op)} (known: {', '.join(OPS)})",
            }
        )
    else:
        problem = _value_problem(op, condition)
        if problem:
            problems.append({"path": f"{where}.value", "message": problem})
    return problems


def conditions_validate(conditions) -> list[dict]:
    """The conditions as stored (`exists`/`notExists` without a value), or RuleInvalid naming
    every bad condition."""
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        raise RuleInvalid(
            "conditions must be a list",
            [{"path": "conditions", "message": f"a list, not {kind(conditions)}"}],
        )
    if len(conditions) > MAX_CONDITIONS:
        raise RuleInvalid(
            f"a rule has at most {MAX_CONDITIONS} conditions",
            [
                {
                    "path": f"conditions.{MAX_CONDITIONS}",
                    "message": f"{len(conditions)} conditions; at most {MAX_CONDITIONS}",
                }
            ],
        )
    problems = [p for i, c in enumerate(conditions) for p in condition_problems(i, c)]
    if problems:
        first = problems[0]
        raise RuleInvalid(f"{first['path']}: {first['message']}", problems)
    return [
        {"path": c["path"], "op": c["op"]}
        if c["op"] in _NO_VALUE_OPS
        else {"path": c["path"], "op": c["op"], "value": c["value"]}
        for c in conditions
    ]


# ---- conditions: compiled ----------------------------------------------------------------------

Check = Callable[[Any], "str | None"]  # arguments -> None when the condition holds, else why not


def _compare(op: str, actual, value) -> bool:
    if op == "lt":
        return actual < value
    if op == "lte":
        return actual <= value
    if op == "gt":
        return actual > value
    return actual >= value


_NUMBER_WORDS = {
    "lt": "less than",
    "lte": "at most",
    "gt": "greater than",
    "gte": "at least",
}
_STRING_WORDS = {"startsWith": "start with", "endsWith": "end with", "glob": "match"}


def _glob_tokens(pattern: str) -> list[tuple[str, str]]:
    """A glob as fnmatch reads it: ("*", "*"), ("?", "?"), ("[", a class with its brackets) or
    ("c", one literal character). Runs of `*` are one; a class of one character (`[*]`, as
    glob_escape writes them) is that character; an unclosed `[` is literal, as in fnmatch."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not tokens or tokens[-1][0] != "*":
                tokens.append(("*", "*"))
        elif c == "?":
            tokens.append(("?", "?"))
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                tokens.append(("c", "["))
                continue
            text, i = pattern[i - 1 : j + 1], j + 1
            one = len(text) == 3 and text[1] != "!"
            tokens.append(("c", text[1]) if one else ("[", text))
        else:
            tokens.append(("c", c))
    return tokens


def _token_covers(outer: tuple[str, str], inner: tuple[str, str]) -> bool:
    """Does one single-character token of the outer glob match everything one of the inner
    glob's tokens matches? (`*` is handled by glob_covers.)"""
    (kind, text), (inner_kind, inner_text) = outer, inner
    if inner_kind == "*":
        return False
    if kind == "?":
        return True
    if kind == "[":
        if inner_kind == "[":
            return inner_text == text
        return inner_kind == "c" and fnmatchcase(inner_text, text)
    return inner_kind == "c" and inner_text == text


def glob_covers(outer: str, inner: str) -> bool:
    """Does the glob `outer` match every name the glob `inner` matches (fnmatch, case-sensitive)?

    Decided on the globs themselves, conservatively: True only when every name `inner` can
    match provably matches `outer` (the inner glob read token by token: an outer `*` covers any
    run of inner tokens, `*` included; `?` covers one character, a literal or a class; a class
    covers a literal it matches, or an identical class; a literal only itself). So `*` covers
    every glob, `email.*` covers `email.send`, `email.*` and `email.?*`, and `email.?` does not
    cover `email.*`. One dynamic-programming pass over the two token lists."""
    tokens, inner_tokens = _glob_tokens(outer), _glob_tokens(inner)
    reach = [True] + [False] * len(inner_tokens)  # the outer glob so far covers inner[:j]
    for token in tokens:
        if token[0] == "*":
            reach = [any(reach[: j + 1]) for j in range(len(reach))]
        else:
            reach = [False] + [
                reach[j] and _token_covers(token, inner_tokens[j]) for j in range(len(inner_tokens))
            ]
    return reach[-1]


def matcher(pattern: str) -> Callable[[str], Any]:
    """A glob compiled once (fnmatch, case-sensitive); a glob without wildcards is equality."""
    if not GLOB_MAGIC.search(pattern):
        return pattern.__eq__
    return re.compile(translate(pattern), re.DOTALL).match


def _op_test(op: str, value) -> Callable[[Any], str | None]:
    """(actual value -> None, or why it fails) for one op and its value (path present)."""
    if op == "equals":
        return lambda a: None if same(a, value) else f"does not equal {shown(value)}"
    if op == "notEquals":
        return lambda a: f"equals {shown(value)}" if same(a, value) else None
    if op == "in":
        return lambda a: None if any(same(a, v) for v in value) else f"is not in {shown(value)}"
    if op in _STRING_OPS:
        test = {
            "startsWith": lambda a: a.startswith(value),
            "endsWith": lambda a: a.endswith(value),
            "glob": matcher(value) if op == "glob" else None,
        }[op]
        words = _STRING_WORDS[op]

        def string_test(a):
            if not isinstance(a, str):
                return f"is {kind(a)}, not a string"
            return None if test(a) else f"does not {words} {shown(value)}"

        return string_test
    if op == "contains":

        def contains_test(a):
            if isinstance(a, str) and isinstance(value, str):
                return None if value in a else f"does not contain {shown(value)}"
            if isinstance(a, list):
                found = any(same(x, value) for x in a)
                return None if found else f"does not contain {shown(value)}"
            expected = "a list" if not isinstance(value, str) else "a string or a list"
            return f"is {kind(a)}, not {expected}"

        return contains_test
    if op in _NUMBER_OPS:
        words = _NUMBER_WORDS[op]

        def number_test(a):
            if not is_number(a):
                return f"is {kind(a)}, not a number"
            return None if _compare(op, a, value) else f"is not {words} {shown(value)}"

        return number_test
    if op == "exists":
        return lambda a: None
    return lambda a: "exists"  # notExists, on a present path


def condition_compile(index: int, condition: dict) -> Check:
    """A validated condition as a small closure over the call's arguments."""
    parts = path_parts(condition["path"])
    op = condition["op"]
    prefix = f"conditions.{index}: {shown(condition['path'])} "
    test = _op_test(op, condition.get("value"))
    absent = None if op == "notExists" else prefix + "is absent"

    def check(arguments):
        actual = resolve(arguments, parts)
        if actual is MISSING:
            return absent
        why = test(actual)
        return None if why is None else prefix + why

    return check
