"""Rows in bulk, in one statement, without a model instance per row: on PostgreSQL a table's
rows travel as one JSON array that `jsonb_to_recordset` turns into rows (`rows_insert`,
`rows_upsert`); elsewhere they go through the ORM's bulk_create. The ORM's own bulk INSERT
compiles and adapts every value of every row in Python (for the audit log's JSON columns,
most of a write-behind batch's CPU); this sends one parameter. Used by runs' unit of work
(runs/services/writes.py) and the audit log's many-entry insert (console/models.py)."""

from __future__ import annotations

import datetime
import json

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection


def rows_insert(model, rows: list[dict]) -> None:
    """Insert rows given as dicts of attribute names (`run_id`, not `run`), in one statement.
    Columns the rows leave out take their default (evaluated once). No primary keys come
    back: nothing in a unit of work needs them."""
    if rows:
        _rows_write(model, rows)


def rows_upsert(model, rows: list[dict], *, unique: tuple[str, ...]) -> None:
    """Insert rows, or overwrite every given column of the row holding the same `unique`."""
    if rows:
        _rows_write(model, rows, unique=unique)


def bulk_insert(objs: list) -> None:
    """Insert model instances of one model (`rows_insert` for instances: seed_demo, the audit
    log's many entries). No primary keys come back."""
    if objs:
        rows_insert(type(objs[0]), _as_rows(objs))


def instances_insert(objs: list, *, key: str) -> None:
    """Insert unsaved instances of one model in one statement and give each its primary key,
    as `bulk_create` does: on PostgreSQL as one JSON parameter, the primary keys read back
    with `key` (a unique field each instance holds already) to match them, since an INSERT's
    RETURNING promises no order; elsewhere through `bulk_create`."""
    if not objs:
        return
    model = type(objs[0])
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs)
        return
    meta = model._meta
    unique = meta.get_field(key)
    pks = dict(_rows_write(model, _as_rows(objs), returning=(unique.column, meta.pk.column)))
    for obj in objs:
        obj.pk = pks[getattr(obj, unique.attname)]
        obj._state.adding, obj._state.db = False, connection.alias


def _columns(model) -> list:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def _as_rows(objs: list) -> list[dict]:
    """Instances of one model as `rows_insert`'s dicts: every column but the primary key."""
    fields = _columns(type(objs[0]))
    return [{f.attname: getattr(obj, f.attname) for f in fields} for obj in objs]


def _rows_write(
    model, rows: list[dict], unique: tuple[str, ...] | None = None, returning: tuple = ()
) -> list:
    fields = _columns(model)
    given = [f for f in fields if f.attname in rows[0]]
    if connection.vendor != "postgresql":
        defaults = {f.attname: f.get_default() for f in fields if f.attname not in rows[0]}
        objs = [model(**defaults, **row) for row in rows]
        if unique is None:
            model.objects.bulk_create(objs)
        else:
            name_of = {f.attname: f.name for f in fields}  # `run_id` -> `run`
            model.objects.bulk_create(
                objs,
                update_conflicts=True,
                unique_fields=[name_of[a] for a in unique],
                update_fields=[f.name for f in given if f.attname not in unique],
            )
        return []
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    record = ", ".join(f"{quote(f.column)} {f.db_type(connection)}" for f in given)
    missing = [f for f in fields if f.attname not in rows[0]]
    columns = ", ".join(quote(f.column) for f in (*given, *missing))
    values = ", ".join(
        [quote(f.column) for f in given] + [f"%s::{f.db_type(connection)}" for f in missing]
    )
    params = [_json_param(f.get_default()) if _is_json(f) else f.get_default() for f in missing]
    # Identifiers and types come from the model; every value is a parameter.
    sql = f"INSERT INTO {table} ({columns}) SELECT {values} "  # noqa: S608
    sql += f"FROM jsonb_to_recordset(%s::jsonb) AS r({record})"
    if unique is not None:
        by = {f.attname: f.column for f in fields}
        keys = ", ".join(quote(by[a]) for a in unique)
        sets = ", ".join(
            f"{quote(f.column)} = EXCLUDED.{quote(f.column)}"
            for f in given
            if f.attname not in unique
        )
        sql += f" ON CONFLICT ({keys}) DO UPDATE SET {sets}"
    if returning:
        sql += " RETURNING " + ", ".join(quote(column) for column in returning)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, json_text(rows)])
        return cursor.fetchall() if returning else []


def _is_json(field) -> bool:
    return field.get_internal_type() == "JSONField"


def _json_param(value):
    return None if value is None else json_text(value)


def json_text(value) -> str:
    """JSON for the database: orjson (fast), or the standard encoder for what orjson refuses
    (integers beyond 64 bits) and for Django's types (Decimal, UUID, lazy strings)."""
    try:
        return orjson.dumps(value, default=_django_default).decode()
    except TypeError:
        return json.dumps(value, cls=_FullTimes)


def _django_default(value):
    return DjangoJSONEncoder().default(value)


class _FullTimes(DjangoJSONEncoder):
    """Django's encoder, but times to the microsecond, as orjson writes them (Django's cuts
    them to milliseconds: a row's time would then differ with the values beside it, and an
    audit entry's writer's tag, taken over the exact time, would no longer hold)."""

    def default(self, o):
        if isinstance(o, datetime.datetime | datetime.time):
            return o.isoformat()
        return super().default(o)
