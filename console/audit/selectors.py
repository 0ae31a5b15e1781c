"""Reads of the audit log: the filtered list (keyset pages, newest first), the exports
(CSV and JSONL, every matching entry, streamed), and the page's readable before → after.
They take the tenant; their edges (the API's `ADMIN`, `/manage/`'s `admin_view`) ask for `admin`
first, so the log's reads sit below the directory that says who may read them."""

import json
from collections.abc import Iterator, Mapping
from urllib.parse import urlencode

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Q
from pydantic import ValidationError

from console.audit.schemas import AuditQuery
from console.core import auditchain, paging
from console.core.csvsafe import csv_text
from console.core.errors import Invalid
from console.models import AuditEvent

FILTERS = ("action", "actor_id", "object_type", "object_id", "date_from", "date_to")
CSV_COLUMNS = [
    "id",
    "at",
    "action",
    "principalId",
    "keyId",
    "ruleId",
    "objectType",
    "objectId",
    "before",
    "after",
    "data",
    "ip",
    "userAgent",
]
EXPORT_CHUNK = 1000
_TIME = DjangoJSONEncoder()


def _invalid(details: list[dict]):
    return Invalid("the audit log's filters are invalid", code="validation_error", details=details)


def audit_filters(params: Mapping, *, tenant) -> dict:
    """The filters of a query string (the page's form), validated by the API's own schema,
    as `audit_query_check` answers them; a bad one raises Invalid naming it."""
    try:
        query = AuditQuery.model_validate({k: params.get(k) for k in params})
    except ValidationError as error:
        raise _invalid(
            [
                {"path": "query." + ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
                for e in error.errors()
            ]
        ) from None
    return audit_query_check(query, tenant=tenant)


def audit_query_check(query: AuditQuery, *, tenant) -> dict:
    """What ninja's validation cannot see: the order of `from` and `to`, the cursor (which
    must name an entry of the tenant)."""
    if query.date_from and query.date_to and query.date_to <= query.date_from:
        raise _invalid([{"path": "query.to", "message": "must be later than `from`"}])
    filters = query.model_dump(include={*FILTERS, "limit", "format"})
    filters["before_pk"] = _cursor(query.cursor, tenant=tenant)
    return filters


def _not_ours():
    return _invalid([{"path": "query.cursor", "message": "not a cursor this server issued"}])


def _cursor(raw: str | None, *, tenant) -> int | None:
    """A cursor names the last entry of a page by its wire id, never by its row number
    (which counts every tenant's entries: finding L2)."""
    if raw is None:
        return None
    wire = paging.read(paging.decode, raw, message="the audit log's filters are invalid")
    if not wire.startswith("i" + auditchain.PUBLIC_ID_PREFIX):
        raise _not_ours()
    rows = AuditEvent.objects.filter(tenant_id=tenant.pk)
    if (legacy := auditchain.legacy_pk(wire[1:])) is not None:
        rows = rows.filter(pk=legacy, public_id__isnull=True)
    else:
        rows = rows.filter(public_id=wire[1:])
    pk = rows.values_list("pk", flat=True).first()
    if pk is None:
        raise _not_ours()
    return pk


def _cursor_of(entry: AuditEvent) -> str:
    return paging.encode(f"i{entry.wire_id}")


def _matching(*, tenant, filters: dict):
    qs = AuditEvent.objects.filter(tenant_id=tenant.pk)
    if filters.get("action"):
        qs = qs.filter(action=filters["action"])
    if actor := filters.get("actor_id"):
        qs = qs.filter(
            Q(actor_principal__external_id=actor)
            | Q(actor_key__public_id=actor)
            | Q(actor_rule=actor)
        )
    if filters.get("object_type"):
        qs = qs.filter(object_type=filters["object_type"])
    if filters.get("object_id"):
        qs = qs.filter(object_id=filters["object_id"])
    if filters.get("date_from"):
        qs = qs.filter(at__gte=filters["date_from"])
    if filters.get("date_to"):
        qs = qs.filter(at__lt=filters["date_to"])
    if filters.get("before_pk"):
        qs = qs.filter(pk__lt=filters["before_pk"])
    related = ("actor_principal__external_id", "actor_key__public_id")
    return qs.select_related("actor_principal", "actor_key").only(
        "at",
        "action",
        "actor_rule",
        "object_type",
        "object_id",
        "data",
        "before",
        "after",
        "ip",
        "user_agent",
        "public_id",
        *related,
    )


def audit_resource(entry: AuditEvent) -> dict:
    principal, key = entry.actor_principal, entry.actor_key
    return {
        "id": entry.wire_id,
        "at": entry.at,
        "action": entry.action,
        "actor": {
            "principal_id": principal.external_id if principal else None,
            "key_id": key.public_id if key else None,
            "rule_id": entry.actor_rule,
        },
        "object_type": entry.object_type,
        "object_id": entry.object_id,
        "before": entry.before,
        "after": entry.after,
        "data": entry.data,
        "ip": entry.ip,
        "user_agent": entry.user_agent,
    }


def audit_list(*, tenant, filters: dict) -> dict:
    """One page, newest first (the order entries were written), and the next cursor."""
    limit = filters.get("limit") or 50
    rows = list(_matching(tenant=tenant, filters=filters).order_by("-pk")[: limit + 1])
    more, rows = len(rows) > limit, rows[:limit]
    return {
        "items": [audit_resource(e) for e in rows],
        "next_cursor": _cursor_of(rows[-1]) if more else None,
    }


def _all(*, tenant, filters: dict) -> Iterator[dict]:
    """Every matching entry, newest first, in keyset chunks (no long-held cursor)."""
    qs = _matching(tenant=tenant, filters={**filters, "before_pk": None})
    before = filters.get("before_pk")
    while True:
        chunk = list((qs.filter(pk__lt=before) if before else qs).order_by("-pk")[:EXPORT_CHUNK])
        for entry in chunk:
            yield audit_resource(entry)
        if len(chunk) < EXPORT_CHUNK:
            return
        before = chunk[-1].pk


def audit_wire(resource: dict) -> dict:
    """The resource as the JSON API writes it (camelCase, times as ISO 8601 with Z)."""
    actor = resource["actor"]
    return {
        "id": resource["id"],
        "at": _TIME.default(resource["at"]),  # as the JSON list writes it (milliseconds, Z)
        "action": resource["action"],
        "actor": {
            "principalId": actor["principal_id"],
            "keyId": actor["key_id"],
            "ruleId": actor["rule_id"],
        },
        "objectType": resource["object_type"],
        "objectId": resource["object_id"],
        "before": resource["before"],
        "after": resource["after"],
        "data": resource["data"],
        "ip": resource["ip"],
        "userAgent": resource["user_agent"],
    }


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def audit_jsonl_lines(*, tenant, filters: dict) -> Iterator[str]:
    """One entry per line (JSON, `\\n`-terminated), every matching entry."""
    for resource in _all(tenant=tenant, filters=filters):
        yield _json(audit_wire(resource)) + "\n"


def audit_csv_lines(*, tenant, filters: dict) -> Iterator[str]:
    """A header line, then one line per matching entry; JSON columns hold compact JSON."""

    def line(cells) -> str:
        return csv_text([cells])  # a cell that reads like a formula is neutralised

    yield line(CSV_COLUMNS)
    for resource in _all(tenant=tenant, filters=filters):
        wire = audit_wire(resource)
        actor = wire.pop("actor")
        wire.update(actor)
        yield line(
            [
                "" if wire[c] is None else _json(wire[c]) if c in JSON_COLUMNS else wire[c]
                for c in CSV_COLUMNS
            ]
        )


JSON_COLUMNS = {"before", "after", "data"}


def audit_diff(before, after) -> list[dict]:
    """Before → after as rows of (field, before, after, changed) for the page: each top-level
    field of either side, its values as indented JSON (absent: None)."""
    before = before if isinstance(before, dict) else ({} if before is None else {"": before})
    after = after if isinstance(after, dict) else ({} if after is None else {"": after})
    rows = []
    for field in sorted(set(before) | set(after)):
        old, new = before.get(field, _ABSENT), after.get(field, _ABSENT)
        rows.append(
            {
                "field": field,
                "before": None if old is _ABSENT else json.dumps(old, indent=1),
                "after": None if new is _ABSENT else json.dumps(new, indent=1),
                "changed": old != new,
            }
        )
    return rows


_ABSENT = object()


# --- the /manage/audit/ page ---

# One index probe per distinct action (index audit_tenant_action): the next action after the
# last one, until none. SELECT DISTINCT read every entry of the tenant (5,000,000: 0.8 s).
_KNOWN_ACTIONS = """
WITH RECURSIVE known(action) AS (
    SELECT MIN(action) FROM console_auditevent WHERE tenant_id = %(tenant)s
    UNION ALL
    SELECT (SELECT MIN(e.action) FROM console_auditevent e
            WHERE e.tenant_id = %(tenant)s AND e.action > known.action)
    FROM known WHERE known.action IS NOT NULL
)
SELECT action FROM known WHERE action IS NOT NULL
"""


def known_actions(*, tenant_id: int) -> list[str]:
    """The distinct actions of the tenant's audit log, sorted (the filter's suggestions)."""
    with connection.cursor() as cursor:
        cursor.execute(_KNOWN_ACTIONS, {"tenant": tenant_id})
        return [action for (action,) in cursor.fetchall()]


FORM_FIELDS = ("action", "actorId", "objectType", "objectId", "from", "to")


def audit_page_context(*, tenant, params: Mapping) -> dict:
    """Everything /manage/audit/ shows: the filters as typed, one page of entries (each with
    its before → after rows), the next page's and the exports' links, the retention."""
    typed = {name: params.get(name, "") for name in FORM_FIELDS}
    kept = {name: value for name, value in typed.items() if value}
    context = {
        "typed": typed,
        "filtered": bool(kept),
        "retention_days": tenant.audit_retention_days,
        "known_actions": known_actions(tenant_id=tenant.pk),
        "csv_url": "/api/v1/audit?" + urlencode({**kept, "format": "csv"}),
        "jsonl_url": "/api/v1/audit?" + urlencode({**kept, "format": "jsonl"}),
    }
    try:
        filters = audit_filters({**kept, "cursor": params.get("cursor", "")}, tenant=tenant)
    except Invalid as error:
        return {**context, "filter_error": error, "entries": [], "next_url": None}
    page = audit_list(tenant=tenant, filters=filters)
    for entry in page["items"]:
        entry["diff"] = audit_diff(entry["before"], entry["after"])
    next_url = None
    if page["next_cursor"]:
        next_url = "/manage/audit/?" + urlencode({**kept, "cursor": page["next_cursor"]})
    return {
        **context,
        "entries": page["items"],
        "next_url": next_url,
        "first_page_url": "/manage/audit/?" + urlencode(kept) if params.get("cursor") else None,
    }
