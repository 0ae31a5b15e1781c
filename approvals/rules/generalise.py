"""Rules from a card that generalise: for each top-level argument of a held call, the choices a
reviewer has when making "calls like this" a rule — this exact value, any value, or a suggested
condition in the rules' own language (the domain of an email address, the folder of a path, the
site of a URL, at most this number). Pure: no model, no database."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from approvals.rules.conditions import MAX_CONDITIONS, path_parts

EMAIL = re.compile(r"^[^@\s]+@([A-Za-z0-9.-]+\.[A-Za-z]{2,})$")
SHORT = 40  # an exact value longer than this is rarely what "calls like this" means


def _suggestion(value) -> dict | None:
    """A condition wider than `equals` that still says something about this value."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return {"op": "lte", "value": value, "label": f"at most {value}"}
    if not isinstance(value, str):
        return None
    found = EMAIL.match(value.strip())
    if found:
        domain = "@" + found.group(1)
        return {"op": "endsWith", "value": domain, "label": f"any address at {domain[1:]}"}
    if value.startswith(("http://", "https://")):
        parts = urlsplit(value)
        if parts.netloc:
            prefix = f"{parts.scheme}://{parts.netloc}/"
            return {"op": "startsWith", "value": prefix, "label": f"any page of {parts.netloc}"}
    if "/" in value.rstrip("/") and " " not in value:
        folder = value.rstrip("/").rsplit("/", 1)[0] + "/"
        return {"op": "startsWith", "value": folder, "label": f"anything under {folder}"}
    return None


def argument_choices(arguments) -> list[dict]:
    """Per top-level argument (whose key is a dotted path; at most MAX_CONDITIONS): `key`,
    `value`, the `suggested` condition or None, and the `default` choice ("suggested" when
    there is one, "exact" for a short scalar, else "any")."""
    if not isinstance(arguments, dict):
        return []
    out = []
    for key, value in arguments.items():
        if path_parts(key) is None or "." in key:
            continue
        suggested = _suggestion(value)
        short = isinstance(value, bool | int | float) or (
            isinstance(value, str) and len(value) <= SHORT
        )
        default = "suggested" if suggested else "exact" if short else "any"
        out.append({"key": key, "value": value, "suggested": suggested, "default": default})
    return out[:MAX_CONDITIONS]


def conditions_from_choices(arguments, chosen: dict) -> list[dict]:
    """The conditions of these choices (`chosen`: key → "exact" | "any" | "suggested"; a key
    not chosen takes its default)."""
    conditions = []
    for item in argument_choices(arguments):
        kind = chosen.get(item["key"]) or item["default"]
        if kind == "exact":
            conditions.append({"path": item["key"], "op": "equals", "value": item["value"]})
        elif kind == "suggested" and item["suggested"]:
            s = item["suggested"]
            conditions.append({"path": item["key"], "op": s["op"], "value": s["value"]})
    return conditions
