"""L7 (the audit chain's verify missed a recomputed chain, deleted newest entries and rows
inserted by SQL) and L2's audit part (audit ids counted every tenant's entries).

The tampering is the report's, done in SQL behind the console's back. On PostgreSQL the
guards are bypassed as the report did (`session_replication_role = replica`, a superuser's
switch); the rows marked `postgres` reproduce what only PostgreSQL's triggers can show."""

import base64
import importlib
import json
import logging

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.db import DatabaseError, connection, transaction
from django.db.migrations.loader import MigrationLoader

from console.audit.log import audit_seal_due
from console.core import auditchain
from console.directory.services import audit
from console.models import AuditEvent
from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


def put(tenant, n, **extra):
    return audit(
        tenant=tenant,
        action=extra.pop("action", "budget.updated"),
        object_type="budget",
        object_id=extra.pop("object_id", f"bud_{n}"),
        before=extra.pop("before", {"ceilingMinorUnits": n}),
        after=extra.pop("after", {"ceilingMinorUnits": n + 1}),
        **extra,
    )


def verify(api) -> dict:
    response = api.get("/api/v1/audit/verify")
    assert response.status_code == 200, response.content
    return response.json()


def sql(statement: str, params=()) -> None:
    """Behind the console's back: on PostgreSQL with the triggers switched off for the rest
    of the test's transaction (only a superuser can), as the report did."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(statement, params)


def chain(tenant) -> list[dict]:
    rows = AuditEvent.objects.filter(tenant=tenant, chain_seq__isnull=False)
    return list(rows.order_by("chain_seq").values(*auditchain.FIELDS))


def recompute_from(tenant, seq: int) -> None:
    """Every hash from `seq` on, recomputed with the algorithm docs/api.md publishes (SHA-256
    over the previous hash and the canonical JSON): what the report did."""
    rows = chain(tenant)
    prev = rows[seq - 2]["hash"] if seq > 1 else None
    for row in rows[seq - 1 :]:
        digest = auditchain.entry_hash(row, prev)
        sql(
            "UPDATE console_auditevent SET prev_hash = %s, hash = %s WHERE id = %s",
            [prev, digest, row["id"]],
        )
        prev = digest


def forged_insert(tenant, *, writer_tag=None, public_id=None, object_id="apr_forged") -> int:
    """The report's INSERT of a back-dated unsealed entry (with a made-up tag when given)."""
    columns, values = (
        ["tenant_id", "action", "object_type", "object_id", "data", "at"],
        [
            tenant.pk,
            "approval.decided",
            "approval",
            object_id,
            "{}",
            "2026-01-01T00:00:00+00:00"
            if connection.vendor == "postgresql"
            else "2026-01-01 00:00:00",
        ],
    )
    if public_id is not None:
        columns += ["public_id", "writer_tag"]
        values += [public_id, writer_tag]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            f"INSERT INTO console_auditevent ({', '.join(columns)}) "  # noqa: S608
            f"VALUES ({', '.join(['%s'] * len(values))}) RETURNING id",
            values,
        )
        return cursor.fetchone()[0]


def upgrade() -> None:
    """Migration 0013's data step, on the models as that migration sees them."""
    migration = importlib.import_module("console.migrations.0013_audit_keyed_chain")
    state = MigrationLoader(connection).project_state(("console", "0013_audit_keyed_chain"))
    migration.seal_and_anchor(state.apps, None)


# --- the report's table, row by row ---


def test_an_untouched_chain_verifies(admin_api, tenant_a):
    for n in range(6):
        put(tenant_a, n)
    body = verify(admin_api)
    assert body["ok"] is True and body["firstBadId"] is None
    assert body["entries"] == AuditEvent.objects.filter(tenant=tenant_a).count()


def test_l7_an_edit_with_every_later_hash_recomputed_is_detected(admin_api, tenant_a):
    made = [put(tenant_a, n, object_id=f"apr_{n}") for n in range(8)]
    audit_seal_due()
    assert verify(admin_api)["ok"] is True
    edited = AuditEvent.objects.get(pk=made[3].pk)
    sql("UPDATE console_auditevent SET object_id = 'innocent' WHERE id = %s", [edited.pk])
    recompute_from(tenant_a, edited.chain_seq)
    body = verify(admin_api)
    assert body["ok"] is False  # the report: {"ok": true, "entries": 79}
    assert (
        body["firstBadId"]
        == admin_api.get("/api/v1/audit", objectId="innocent").json()["items"][0]["id"]
    )


def test_l7_the_newest_entries_deleted_are_detected(admin_api, tenant_a):
    made = [put(tenant_a, n) for n in range(10)]
    assert verify(admin_api)["ok"] is True  # signs the head (10 and more)
    for entry in made[-5:]:
        sql("DELETE FROM console_auditevent WHERE id = %s", [entry.pk])
    body = verify(admin_api)
    assert body["ok"] is False  # the report: {"ok": true, "entries": 74}
    assert body["reason"] == "truncated" and body["firstBadId"] is None


def test_l7_the_audit_page_shows_deleted_newest_entries_as_broken(client, admin_a, tenant_a):
    client.force_login(admin_a.user)
    made = [put(tenant_a, n) for n in range(4)]
    assert "intact" in client.get("/manage/audit/verify/").content.decode()
    sql("DELETE FROM console_auditevent WHERE id = %s", [made[-1].pk])
    status = client.get("/manage/audit/verify/").content.decode()
    assert "broken" in status and "intact" not in status


def test_a_middle_entry_deleted_is_still_detected(admin_api, tenant_a):
    made = [put(tenant_a, n) for n in range(5)]
    audit_seal_due()
    sql("DELETE FROM console_auditevent WHERE id = %s", [made[2].pk])
    body = verify(admin_api)
    assert body["ok"] is False and body["reason"] == "removed"
    assert body["firstBadId"] == made[3].wire_id


def test_l7_a_row_inserted_by_sql_is_reported_and_never_sealed(admin_api, tenant_a):
    for n in range(3):
        put(tenant_a, n)
    forged = forged_insert(tenant_a, public_id="aud_forgedforgedforg", writer_tag="0" * 64)
    body = verify(admin_api)
    assert body["ok"] is False  # the report: {"ok": true, "entries": 651}, sealed by verify
    assert body["reason"] == "inserted" and body["firstBadId"] == "aud_forgedforgedforg"
    assert AuditEvent.objects.get(pk=forged).hash is None  # verify did not seal it
    put(tenant_a, 9)  # the console's next entry is sealed past it, not after it
    audit_seal_due()
    assert AuditEvent.objects.get(pk=forged).hash is None
    assert verify(admin_api)["reason"] == "inserted"


def test_l7_a_copied_writer_tag_does_not_make_a_forged_row_the_consoles(admin_api, tenant_a):
    genuine = put(tenant_a, 1)
    forged_insert(tenant_a, public_id="aud_othercopyothercop", writer_tag=genuine.writer_tag)
    body = verify(admin_api)
    assert body["ok"] is False and body["reason"] == "inserted"


def test_l7_a_legacy_row_without_a_writer_tag_is_reported(admin_api, tenant_a):
    put(tenant_a, 1)
    forged = forged_insert(tenant_a)  # the report's INSERT: no public id, no tag
    body = verify(admin_api)
    assert body["ok"] is False and body["firstBadId"] == f"aud_{forged}"


@pytest.mark.postgres
def test_on_postgres_a_plain_update_is_still_refused(tenant_a):
    made = put(tenant_a, 1)
    audit_seal_due()
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE console_auditevent SET object_id = 'x' WHERE id = %s", [made.pk])


@pytest.mark.postgres
@pytest.mark.parametrize(
    "values",
    [
        "NULL, NULL",  # the report's INSERT: no writer
        "'aud_sealedsealedseal', repeat('0', 64)",  # a tag, but sealed already (below)
    ],
)
def test_l7_on_postgres_an_insert_without_the_writer_is_refused(tenant_a, values):
    sealed = "1, repeat('0', 64)" if "sealed" in values else "NULL, NULL"
    with (
        pytest.raises(DatabaseError, match="INSERT refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "INSERT INTO console_auditevent (tenant_id, at, action, object_type, object_id, "  # noqa: S608
            f"data, public_id, writer_tag, chain_seq, hash) VALUES (%s, now(), 'x', 'x', 'x', "
            f"'{{}}', {values}, {sealed})",
            [tenant_a.pk],
        )


@pytest.fixture
def console_role():
    """A role like the console's in production (not a superuser), for the test's transaction."""
    role = "gavel_sec_audit_app"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
    yield role


@pytest.mark.postgres
@pytest.mark.parametrize("table", ["console_auditevent", "console_auditcheckpoint"])
def test_l7_on_postgres_truncate_is_refused(admin_api, tenant_a, console_role, table):
    put(tenant_a, 1)
    assert verify(admin_api)["ok"] is True
    with (
        pytest.raises(DatabaseError, match="TRUNCATE refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred FK check left pending
        cursor.execute(f"SET LOCAL ROLE {console_role}")
        cursor.execute(f"TRUNCATE {table} CASCADE")
    assert AuditEvent.objects.filter(tenant=tenant_a).exists()


@pytest.mark.postgres
def test_l7_on_postgres_checkpoints_cannot_be_updated_or_deleted(admin_api, tenant_a):
    put(tenant_a, 1)
    assert verify(admin_api)["ok"] is True
    for statement in (
        "UPDATE console_auditcheckpoint SET position = 0",
        "DELETE FROM console_auditcheckpoint",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)


# --- checkpoints: signed, outside the database, checkable by a third party ---


def test_l7_verify_answers_a_checkpoint_anyone_can_check_with_the_public_key(admin_api, tenant_a):
    for n in range(3):
        put(tenant_a, n)
    body = verify(admin_api)
    checkpoint = body["checkpoint"]
    statement = json.loads(checkpoint["statement"])
    assert statement["tenant"] == "tenant-a" and statement["position"] == body["entries"]
    assert statement["hash"] == checkpoint["hash"] and checkpoint["entries"] == body["entries"]
    public = Ed25519PublicKey.from_public_bytes(
        base64.urlsafe_b64decode(checkpoint["publicKey"] + "==")
    )
    signature = base64.urlsafe_b64decode(checkpoint["signature"] + "==")
    public.verify(signature, checkpoint["statement"].encode())  # raises when it does not hold


def test_l7_each_checkpoint_is_also_written_to_the_log(
    admin_api, tenant_a, caplog, django_capture_on_commit_callbacks
):
    put(tenant_a, 1)
    with (
        caplog.at_level(logging.INFO, logger="gavel.audit.checkpoint"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        body = verify(admin_api)
    lines = [r.getMessage() for r in caplog.records if r.name == "gavel.audit.checkpoint"]
    checkpoint = body["checkpoint"]
    assert len(lines) == 1
    assert checkpoint["statement"] in lines[0] and checkpoint["signature"] in lines[0]


def test_l7_the_sweep_signs_a_moved_head_now_and_then(tenant_a, tenant_b, settings):
    from console.audit import checkpoints as auditcheckpoints

    auditcheckpoints._next_sweep["at"] = None
    put(tenant_a, 1)
    audit_seal_due()
    assert auditcheckpoints.audit_checkpoint_due() == 1  # tenant A moved; B has no entry
    assert auditcheckpoints.audit_checkpoint_due() == 0  # not again within the minute


def test_entries_of_any_json_are_sealed_as_the_writers(admin_api, tenant_a):
    """The writer's tag is computed before the insert and checked against what the database
    returns (PostgreSQL's jsonb rewrites numbers): every value must still match."""
    odd = {
        "big": 1e20,
        "negativeZero": -0.0,
        "huge": 10**30,
        "tenth": 0.1,
        "tiny": 1e-7,
        "max": 1.7976931348623157e308,
        "text": 'é\u2028😀"\\',
        5: "an int key",
        "pair": (1, 2.5),
        "nested": [{"b": 1.5e300, "c": None, "d": True}],
    }
    made = put(tenant_a, 1, data=odd, before=[1e16, -1], after=12.0)
    body = verify(admin_api)
    assert body["ok"] is True, body
    assert AuditEvent.objects.get(pk=made.pk).hash is not None


def test_l7_entries_sealed_before_the_upgrade_verify_up_to_its_checkpoint(admin_api, tenant_a):
    legacy = [forged_insert(tenant_a, object_id=f"old_{n}") for n in range(3)]
    upgrade()  # sealed as before (SHA-256), then a first checkpoint
    rows = chain(tenant_a)
    assert [r["id"] for r in rows[-3:]] == legacy
    assert all(r["hash"] == auditchain.entry_hash(r, r["prev_hash"]) for r in rows)
    for n in range(3):
        put(tenant_a, n)  # keyed from here on
    body = verify(admin_api)
    assert body["ok"] is True and body["entries"] == len(rows) + 3
    assert json.loads(body["checkpoint"]["statement"])["keyedFrom"] == len(rows) + 1
    # the report's rewrite, legacy part included: the first checkpoint pins the legacy head
    sql("UPDATE console_auditevent SET object_id = 'innocent' WHERE id = %s", [legacy[0]])
    recompute_from(tenant_a, rows[-3]["chain_seq"])
    body = verify(admin_api)
    assert body["ok"] is False and body["reason"] == "rewritten"


def test_l7_legacy_entries_whose_checkpoints_are_gone_are_reported(admin_api, tenant_a):
    forged_insert(tenant_a, object_id="old")
    upgrade()
    assert verify(admin_api)["ok"] is True
    sql("DELETE FROM console_auditcheckpoint WHERE tenant_id = %s", [tenant_a.pk])
    body = verify(admin_api)
    assert body["ok"] is False and body["reason"] == "checkpoint_missing"


def test_l7_a_forged_checkpoint_is_reported(admin_api, tenant_a):
    put(tenant_a, 1)
    assert verify(admin_api)["ok"] is True
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "INSERT INTO console_auditcheckpoint (tenant_id, at, position, head_hash, "
            "statement, key_id, signature) SELECT tenant_id, at, position, head_hash, "
            "replace(statement, '\"keyedFrom\":1', '\"keyedFrom\":999'), key_id, signature "
            "FROM console_auditcheckpoint WHERE tenant_id = %s",
            [tenant_a.pk],
        )
    body = verify(admin_api)
    assert body["ok"] is False and body["reason"] == "checkpoint_invalid"


# --- L2: audit ids ---


def test_l2_audit_ids_do_not_follow_other_tenants_activity(client, admin_api, tenant_a, tenant_b):
    put(tenant_a, 1, object_id="first")
    for n in range(7):
        put(tenant_b, n)
    put(tenant_a, 2, object_id="second")
    items = admin_api.get("/api/v1/audit", limit=2).json()["items"]
    ids = [item["id"] for item in items]
    assert [i["objectId"] for i in items] == ["second", "first"]
    assert not any(i[4:].isdigit() for i in ids)  # the report: aud_2578, aud_2570
    assert all(i.startswith("aud_") and len(i) > 12 for i in ids)


def test_l2_the_audit_cursor_does_not_carry_a_row_number(admin_api, tenant_a):
    for n in range(3):
        put(tenant_a, n)
    body = admin_api.get("/api/v1/audit", limit=1).json()
    decoded = base64.urlsafe_b64decode(body["nextCursor"] + "==").decode()
    assert decoded == "i" + body["items"][0]["id"]  # the entry's opaque id, not its row
    newest = AuditEvent.objects.filter(tenant=tenant_a).order_by("-pk").first()
    numbered = base64.urlsafe_b64encode(f"a{newest.pk}".encode()).decode().rstrip("=")
    assert admin_api.get("/api/v1/audit", cursor=numbered).status_code == 422  # the old form
    following = admin_api.get("/api/v1/audit", limit=1, cursor=body["nextCursor"]).json()
    assert following["items"][0]["id"] != body["items"][0]["id"]


def test_entries_written_before_public_ids_keep_their_ids(admin_api, tenant_a):
    old = forged_insert(tenant_a, object_id="old")  # as written before: no public id
    put(tenant_a, 1)
    body = admin_api.get("/api/v1/audit", limit=1).json()
    rest = admin_api.get("/api/v1/audit", cursor=body["nextCursor"]).json()["items"]
    assert f"aud_{old}" in [item["id"] for item in rest]


def test_l2_another_tenants_entry_cannot_serve_as_a_cursor(client, admin_api, tenant_b):
    theirs = put(tenant_b, 1)
    cursor = base64.urlsafe_b64encode(f"i{theirs.wire_id}".encode()).decode().rstrip("=")
    response = admin_api.get("/api/v1/audit", cursor=cursor)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "query.cursor"
    admin_b = PrincipalFactory(tenant=tenant_b, role="admin")
    api_b = ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=admin_b))
    assert api_b.get("/api/v1/audit", cursor=cursor).status_code == 200


def test_a_checkpoint_recording_a_pruned_prefix_lets_verify_start_after_it(admin_api, tenant_a):
    """Room for retention (issue #27): a prefix pruned whole, with a signed checkpoint that
    records its last position and hash, is not a removed entry."""
    from console.audit.checkpoints import audit_checkpoint

    for n in range(5):
        put(tenant_a, n)
    audit_seal_due()
    rows = chain(tenant_a)
    cut = rows[2]  # prune positions 1..3
    audit_checkpoint(
        tenant=tenant_a,
        by="prune",
        terms={"keyed_from": 1, "pruned_through": cut["chain_seq"], "pruned_hash": cut["hash"]},
    )
    for row in rows[:3]:
        sql("DELETE FROM console_auditevent WHERE id = %s", [row["id"]])
    body = verify(admin_api)
    assert body["ok"] is True and body["entries"] == len(rows) - 3
    assert json.loads(body["checkpoint"]["statement"])["prunedThrough"] == cut["chain_seq"]
