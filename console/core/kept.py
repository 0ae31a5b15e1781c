"""Reads compiled once: a queryset shape on a hot path whose SQL the ORM builds once per
process, database and kinds of values, then runs with each call's own values.

Building and compiling a queryset costs the ORM about 1 ms of CPU per statement; running it
costs PostgreSQL about 0.1 ms (a decision's reads, docs/benchmarks.md "2026-12-07,
afternoon"). `Kept(build)` calls `build(*values)` (a function returning the queryset) once
with markers in place of the values, compiles it, and keeps its SQL with the place of each
value among the parameters; a later call runs that SQL with its own values and makes the rows
what the queryset would have yielded: model instances (`select_related` included, each with
its annotations) or `values_list` tuples, through the ORM's own converters and populators.

Only what is proven the same is kept. `build` is compiled twice, with two different sets of
markers: the SQL must be the same text, every marker must reach the parameters unchanged,
and every other parameter must be equal in both (a value the build turned into something
else, such as `value + 1` or `%value%`, makes them differ). Values are ints (not bools) or
strs, and a marker is a value no real call uses (a 63-bit int near the top, a str with
control characters). A shape that fails any of these, or a kind of iterable or option this
module does not reproduce (`prefetch_related`, `values()`, a named tuple), is never kept:
every call of it goes through the ORM as before. So is a call with any other kind of value
(None, a bool, a list), which the ORM would compile into different SQL anyway."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections
from django.db.models.query import (
    FlatValuesListIterable,
    ModelIterable,
    QuerySet,
    ValuesListIterable,
    get_related_populators,
)
from django.db.transaction import TransactionManagementError

_INT_MARKERS = (9_223_372_036_854_770_000, 9_223_372_036_854_771_000)  # < 2**63 - 1
_STR_MARKERS = ("\x1fkept-a-{}\x1f", "\x1fkept-b-{}\x1f")
_UNKEPT = object()


def _kind(value) -> type | None:
    kind = type(value)
    return kind if kind in (int, str) else None


def _marker(kind: type, index: int, round_: int):
    if kind is int:
        return _INT_MARKERS[round_] + index
    return _STR_MARKERS[round_].format(index)


class _Plan:
    """A compiled shape: its SQL, where each parameter comes from, how its rows are made."""

    def __init__(self, queryset: QuerySet, compiler, sql: str, sources: list):
        self.sql = sql
        self.sources = sources  # per parameter: ("value", index) or ("constant", value)
        self.iterable = queryset._iterable_class
        self.for_update = bool(queryset.query.select_for_update)
        self.col_count = compiler.col_count
        self.trim = compiler.has_extra_select
        fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
        self.converters = list(compiler.get_converters(fields).items())
        if self.iterable is ModelIterable:
            klass_info, select = compiler.klass_info, compiler.select
            self.model = klass_info["model"]
            start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
            self.span = (start, end)
            self.init_list = [f[0].target.attname for f in select[start:end]]
            self.populators = get_related_populators(klass_info, select, queryset.db)
            self.annotations = list((compiler.annotation_col_map or {}).items())

    def params(self, values: tuple) -> list:
        return [values[v] if how == "value" else v for how, v in self.sources]

    def rows(self, alias: str, values: tuple) -> list:
        connection = connections[alias]
        locks = self.for_update and connection.features.has_select_for_update
        if locks and connection.get_autocommit():
            # As the ORM refuses it: a lock outside a transaction would be let go at once.
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.params(values))
            fetched = cursor.fetchall()
        if self.trim:
            fetched = [row[: self.col_count] for row in fetched]
        if self.converters:
            fetched = [self._convert(row, connection) for row in fetched]
        if self.iterable is FlatValuesListIterable:
            return [row[0] for row in fetched]
        if self.iterable is ValuesListIterable:
            return [tuple(row) for row in fetched]
        return [self._instance(alias, row) for row in fetched]

    def _convert(self, row, connection) -> list:
        row = list(row)
        for position, (converters, expression) in self.converters:
            value = row[position]
            for converter in converters:
                value = converter(value, expression, connection)
            row[position] = value
        return row

    def _instance(self, alias: str, row):
        start, end = self.span
        obj = self.model.from_db(alias, self.init_list, row[start:end])
        for populator in self.populators:
            populator.populate(row, obj)
        for name, position in self.annotations:
            setattr(obj, name, row[position])
        return obj


def _keepable(queryset: QuerySet) -> bool:
    return (
        queryset._iterable_class in (ModelIterable, ValuesListIterable, FlatValuesListIterable)
        and not queryset._prefetch_related_lookups
        and not queryset._known_related_objects
        and not queryset.query.combinator
    )


def _compiled(build, kinds: tuple, alias: str, round_: int):
    markers = tuple(_marker(kind, i, round_) for i, kind in enumerate(kinds))
    queryset = build(*markers).using(alias)
    compiler = queryset.query.get_compiler(using=alias)
    sql, params = compiler.as_sql()
    return queryset, compiler, sql, list(params), markers


def _plan(build, kinds: tuple, alias: str) -> _Plan | None:
    """The shape's plan, or None when it cannot be proven the same for every value."""
    queryset, compiler, sql, params, markers = _compiled(build, kinds, alias, 0)
    _, _, sql_b, params_b, markers_b = _compiled(build, kinds, alias, 1)
    if not _keepable(queryset) or sql != sql_b or len(params) != len(params_b):
        return None
    where = {(type(m), m): i for i, m in enumerate(markers)}
    where_b = {(type(m), m): i for i, m in enumerate(markers_b)}
    sources, seen = [], set()
    for a, b in zip(params, params_b, strict=True):
        index, index_b = where.get((type(a), a)), where_b.get((type(b), b))
        if index is not None and index == index_b:
            sources.append(("value", index))
            seen.add(index)
        elif index is None and index_b is None and type(a) is type(b) and a == b:
            if isinstance(a, str) and "\x1fkept-" in a:
                return None  # a marker inside another value (a LIKE pattern, say)
            sources.append(("constant", a))
        else:
            return None
    if seen != set(range(len(kinds))):
        return None  # a value that never reaches the SQL as itself
    return _Plan(queryset, compiler, sql, sources)


class Kept:
    """`Kept(build)(*values)`: the rows of `build(*values)` (a list), from SQL compiled once
    per database and kinds of values (see the module's docstring); `using` names the
    database. `Kept.enabled = False` runs every call through the ORM (a test's comparison)."""

    enabled = True

    def __init__(self, build: Callable[..., QuerySet]):
        self._build = build
        self._plans: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def __call__(self, *values, using: str = "default") -> list:
        kinds = tuple(_kind(v) for v in values)
        plan = _UNKEPT
        if Kept.enabled and None not in kinds:
            key = (using, connections[using].vendor, kinds)
            plan = self._plans.get(key, _UNKEPT)
            if plan is _UNKEPT:
                with self._lock:
                    plan = self._plans.get(key, _UNKEPT)
                    if plan is _UNKEPT:
                        plan = _plan(self._build, kinds, using)
                        self._plans[key] = plan
        if plan is _UNKEPT or plan is None:
            return list(self._build(*values).using(using))
        return plan.rows(using, values)


__all__ = ["Kept"]
