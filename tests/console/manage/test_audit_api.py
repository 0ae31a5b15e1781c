"""GET /api/v1/audit (list, filters, keyset pages, CSV and JSONL exports) and
GET /api/v1/audit/verify, for a `manage` key with `admin` or an admin's browser session;
tenants kept apart, other roles refused."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from console.audit.log import audit_seal_due
from console.directory.services import audit
from console.models import ApiKey, AuditEvent
from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db
AT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def admin_api(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


def put(tenant, n, *, at=None, **extra):
    """An entry at a known time (AT + n minutes) with a known before → after."""
    made = audit(
        tenant=tenant,
        action=extra.pop("action", "budget.updated"),
        object_type=extra.pop("object_type", "budget"),
        object_id=extra.pop("object_id", f"bud_{n}"),
        before={"ceilingMinorUnits": n},
        after={"ceilingMinorUnits": n + 1},
        **extra,
    )
    return made


def put_at(tenant, n, **extra):
    return AuditEvent.objects.create(
        tenant=tenant,
        at=AT + timedelta(minutes=n),
        action=extra.pop("action", "budget.updated"),
        object_type=extra.pop("object_type", "budget"),
        object_id=extra.pop("object_id", f"bud_{n}"),
        before={"ceilingMinorUnits": n},
        after={"ceilingMinorUnits": n + 1},
        **extra,
    )


def test_an_entry_has_every_field_of_the_contract(admin_api, tenant_a, admin_a):
    key = ApiKey.objects.filter(tenant=tenant_a, principal=admin_a).get()
    made = audit(
        tenant=tenant_a,
        action="budget.updated",
        object_type="budget",
        object_id="bud_1",
        before={"name": "A"},
        after={"name": "B"},
        data={"note": "n"},
        principal=admin_a,
        key=key,
        ip="203.0.113.5",
        user_agent="UA/2",
    )
    body = admin_api.get("/api/v1/audit", objectId="bud_1").json()
    assert body == {
        "items": [
            {
                "id": made.wire_id,
                "at": DjangoJSONEncoder().default(made.at),  # ISO 8601, milliseconds, Z
                "action": "budget.updated",
                "actor": {"principalId": "admin@a.example", "keyId": key.public_id, "ruleId": None},
                "objectType": "budget",
                "objectId": "bud_1",
                "before": {"name": "A"},
                "after": {"name": "B"},
                "data": {"note": "n"},
                "ip": "203.0.113.5",
                "userAgent": "UA/2",
            }
        ],
        "nextCursor": None,
    }


def test_filters_narrow_by_action_actor_object_and_time(admin_api, tenant_a, admin_a):
    key = ApiKey.objects.get(tenant=tenant_a, principal=admin_a)
    e0 = put_at(tenant_a, 0, actor_principal=admin_a)
    e1 = put_at(tenant_a, 1, actor_key=key, actor_principal=admin_a, action="budget.created")
    e2 = put_at(tenant_a, 2, actor_rule="rul_x", action="approval.decided", object_type="approval")
    e3 = put_at(tenant_a, 60 * 24, object_id="bud_late")  # the next day

    def ids(**query):
        response = admin_api.get("/api/v1/audit", **query)
        assert response.status_code == 200, response.content
        return [item["id"] for item in response.json()["items"]]

    wire = {e: e.wire_id for e in (e0, e1, e2, e3)}
    assert ids(action="budget.created") == [wire[e1]]
    assert ids(actorId="admin@a.example") == [wire[e1], wire[e0]]
    assert ids(actorId=key.public_id) == [wire[e1]]
    assert ids(actorId="rul_x") == [wire[e2]]
    assert ids(objectType="approval") == [wire[e2]]
    assert ids(objectId="bud_late") == [wire[e3]]
    assert ids(**{"from": "2026-12-01T10:01:00Z", "to": "2026-12-01T10:02:00Z"}) == [wire[e1]]
    assert ids(**{"from": "2026-12-02", "to": "2026-12-02"}) == [wire[e3]]  # a day, inclusive
    assert ids(**{"to": "2026-12-01"}) == [wire[e2], wire[e1], wire[e0]]


def test_keyset_pages_walk_every_entry_newest_first_once(admin_api, tenant_a):
    for n in range(7):
        put(tenant_a, n)
    total = AuditEvent.objects.filter(tenant=tenant_a).count()
    seen, cursor = [], None
    while True:
        query = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        body = admin_api.get("/api/v1/audit", **query).json()
        assert len(body["items"]) <= 3
        seen += [item["id"] for item in body["items"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
    newest_first = AuditEvent.objects.filter(tenant=tenant_a).order_by("-pk")
    assert seen == [e.wire_id for e in newest_first] and len(seen) == total


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ({"limit": 0}, "query.limit"),
        ({"limit": 201}, "query.limit"),
        ({"from": "yesterday"}, "query.from"),
        ({"to": "2026-13-01"}, "query.to"),
        ({"from": "2026-12-02", "to": "2026-12-01"}, "query.to"),
        ({"format": "xml"}, "query.format"),
        ({"cursor": "not-ours"}, "query.cursor"),
        ({"action": "x" * 300}, "query.action"),
    ],
)
def test_a_bad_filter_is_a_422_naming_it(admin_api, query, path):
    response = admin_api.get("/api/v1/audit", **query)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert [d["path"] for d in error["details"]] == [path]


def _body(response) -> bytes:
    return b"".join(response.streaming_content)


def test_csv_holds_every_matching_entry_with_json_columns(admin_api, tenant_a, admin_a):
    made = put_at(tenant_a, 0, actor_principal=admin_a, ip="203.0.113.1", user_agent='a "q"')
    response = admin_api.get("/api/v1/audit", objectId="bud_0", format="csv")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="audit.csv"'
    assert _body(response) == (
        b"id,at,action,principalId,keyId,ruleId,objectType,objectId,before,after,data,ip,"
        b"userAgent\r\n"
        + f"{made.wire_id},2026-12-01T10:00:00Z,budget.updated,admin@a.example,,,".encode()
        + b"budget,bud_0,"
        + b'"{""ceilingMinorUnits"":0}","{""ceilingMinorUnits"":1}",{},203.0.113.1,"a ""q"""\r\n'
    )


def test_jsonl_streams_every_entry_not_one_page(admin_api, tenant_a):
    for n in range(60):
        put(tenant_a, n, object_type="bulk")
    response = admin_api.get("/api/v1/audit", objectType="bulk", format="jsonl")
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    body = _body(response)
    lines = body.decode().split("\n")
    assert lines[-1] == "" and len(lines) == 61  # one entry per line, each ending in \n
    entries = [json.loads(line) for line in lines[:-1]]
    assert [e["objectId"] for e in entries] == [f"bud_{n}" for n in reversed(range(60))]
    listed = admin_api.get("/api/v1/audit", objectType="bulk", limit=1).json()["items"][0]
    assert entries[0] == listed  # the same resource as the JSON list
    assert body.startswith(b'{"action":"budget.updated","actor":{')  # compact, sorted keys


def test_another_tenants_entries_never_show(client, admin_api, tenant_a, tenant_b):
    theirs = put(tenant_b, 1, object_id="secret_b")
    assert admin_api.get("/api/v1/audit", objectId="secret_b").json()["items"] == []
    csv_body = _body(admin_api.get("/api/v1/audit", format="csv"))
    assert b"secret_b" not in csv_body
    admin_b = PrincipalFactory(tenant=tenant_b, role="admin")
    api_b = ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=admin_b))
    items = api_b.get("/api/v1/audit").json()["items"]
    assert theirs.wire_id in [i["id"] for i in items]
    assert all(AuditEvent.objects.get(public_id=i["id"]).tenant_id == tenant_b.pk for i in items)


def test_only_admins_read_the_log(client, tenant_a, lead_a, viewer_a, admin_a):
    assert ApiClient(client, None).get("/api/v1/audit").status_code == 401
    lead_key = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    assert lead_key.get("/api/v1/audit").status_code == 403
    assert lead_key.get("/api/v1/audit/verify").status_code == 403
    ingest = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert ingest.get("/api/v1/audit").status_code == 403
    client.force_login(viewer_a.user)
    assert client.get("/api/v1/audit").status_code == 403
    client.force_login(admin_a.user)
    assert client.get("/api/v1/audit").status_code == 200  # an admin's browser session


def test_verify_answers_ok_then_names_a_tampered_entry(admin_api, tenant_a):
    made = [put(tenant_a, n) for n in range(3)]
    body = admin_api.get("/api/v1/audit/verify").json()
    count = AuditEvent.objects.filter(tenant=tenant_a).count()
    assert body | {"checkpoint": None} == {
        "ok": True,
        "entries": count,
        "firstBadId": None,
        "reason": None,
        "checkpoint": None,
    }
    audit_seal_due()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # the trigger would refuse: a superuser's bypass
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "UPDATE console_auditevent SET after = %s WHERE id = %s",
            ['{"ceilingMinorUnits": 999}', made[1].pk],
        )
    body = admin_api.get("/api/v1/audit/verify").json()
    assert body["ok"] is False and body["firstBadId"] == made[1].wire_id


def test_openapi_describes_the_audit_operations_as_the_contract_names_them(client):
    schema = client.get("/api/v1/openapi.json").json()
    listing = schema["paths"]["/api/v1/audit"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"action", "actorId", "objectType", "objectId", "from", "to", "limit", "cursor"} <= names
    assert "format" in names and "/api/v1/audit/verify" in schema["paths"]
