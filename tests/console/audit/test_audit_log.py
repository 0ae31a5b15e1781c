"""The audit log's storage: its columns, the hash chain sealed after commit, and append-only
at every level (model, queryset, Django admin, and on PostgreSQL a trigger)."""

import pytest
from django.contrib.admin.sites import site
from django.db import DatabaseError, connection, transaction
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from console.audit.log import audit_many, audit_seal, audit_seal_due, audit_verify
from console.core import auditchain, links
from console.directory.services import audit
from console.models import AppendOnly, AuditEvent

pytestmark = pytest.mark.django_db


def entry(tenant, n=0, **extra):
    return audit(
        tenant=tenant,
        action="budget.updated",
        object_type="budget",
        object_id=f"bud_{n}",
        before={"ceilingMinorUnits": n},
        after={"ceilingMinorUnits": n + 1},
        **extra,
    )


def test_before_after_and_a_rule_actor_are_columns_and_old_callers_still_work(tenant_a):
    new_style = entry(tenant_a, rule="rul_abc", data={"note": "x"})
    old_style = audit(
        tenant=tenant_a,
        action="webhook.created",
        object_type="webhook",
        object_id="wh_1",
        data={"before": None, "after": {"url": "https://x.example"}, "extra": 1},
    )
    new_style.refresh_from_db(), old_style.refresh_from_db()
    assert (new_style.before, new_style.after) == (
        {"ceilingMinorUnits": 0},
        {"ceilingMinorUnits": 1},
    )
    assert new_style.actor_rule == "rul_abc" and new_style.data == {"note": "x"}
    assert old_style.before is None and old_style.after == {"url": "https://x.example"}
    assert old_style.data == {"extra": 1}  # before/after no longer inside data


def test_the_request_being_served_gives_address_and_user_agent(tenant_a, settings):
    settings.GAVEL_TRUSTED_PROXIES = 1
    request = RequestFactory().get(
        "/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9", HTTP_USER_AGENT="UA/1"
    )
    token = links.current_request.set(request)
    try:
        made = entry(tenant_a)
    finally:
        links.current_request.reset(token)
    off_request = entry(tenant_a, 1)
    assert (made.ip, made.user_agent) == ("203.0.113.9", "UA/1")  # the proxy's client
    assert (off_request.ip, off_request.user_agent) == (None, None)


def test_entries_are_sealed_in_order_into_a_per_tenant_chain(tenant_a, tenant_b):
    AuditEvent.objects.filter(tenant=tenant_a)  # fixtures may have audited already
    audit_seal_due()
    first = [entry(tenant_a, n) for n in range(3)]
    other = entry(tenant_b)
    assert all(e.hash is None for e in first)  # unsealed until after commit
    assert audit_seal_due() == 4
    rows = list(AuditEvent.objects.filter(tenant=tenant_a).order_by("chain_seq"))
    assert [r.chain_seq for r in rows] == list(range(1, len(rows) + 1))
    for before, after in zip(rows, rows[1:], strict=False):
        assert after.prev_hash == before.hash
    assert rows[0].prev_hash is None
    sealed_other = AuditEvent.objects.get(pk=other.pk)
    assert sealed_other.chain_seq == AuditEvent.objects.filter(tenant=tenant_b).count()
    row = AuditEvent.objects.filter(pk=first[1].pk).values(*auditchain.KEYED_FIELDS).get()
    assert row["hash"] == auditchain.keyed_hash(row, row["prev_hash"])  # keyed: not recomputable
    assert row["hash"] != auditchain.entry_hash(row, row["prev_hash"])  # without the key
    assert audit_seal(tenant_id=tenant_a.pk) == 0  # nothing left; sealing twice changes nothing


def test_a_commit_seals_its_entries_once_per_tenant(tenant_a, django_capture_on_commit_callbacks):
    audit_seal_due()
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        made = [entry(tenant_a, n) for n in range(3)]
    assert len(callbacks) == 1  # one seal for the transaction's three entries
    assert all(AuditEvent.objects.get(pk=e.pk).hash for e in made)


def test_a_seal_is_one_update_and_audit_many_one_insert_in_the_order_given(tenant_a):
    audit_seal_due()
    with CaptureQueriesContext(connection) as written:
        audit_many(
            [
                {
                    "tenant": tenant_a,
                    "action": "budget.updated",
                    "object_type": "budget",
                    "object_id": f"bud_{n}",
                    "data": {"n": n, "before": {"c": n}},
                }
                for n in range(4)
            ]  # fmt: skip
        )
    inserts = [q for q in written.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1
    with CaptureQueriesContext(connection) as sealed:
        assert audit_seal(tenant_id=tenant_a.pk) == 4
    updates = [q for q in sealed.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    made = AuditEvent.objects.filter(tenant=tenant_a, object_type="budget")
    rows = list(made.order_by("chain_seq"))
    assert [r.object_id for r in rows] == ["bud_0", "bud_1", "bud_2", "bud_3"]
    assert rows[1].before == {"c": 1} and rows[1].data == {"n": 1}  # as `audit` stores them
    for before, after in zip(rows, rows[1:], strict=False):
        assert after.prev_hash == before.hash and after.chain_seq == before.chain_seq + 1
    assert audit_verify(tenant=tenant_a)["ok"] is True


def test_verify_is_ok_on_an_untouched_chain(tenant_a):
    for n in range(5):
        entry(tenant_a, n)
    result = audit_verify(tenant=tenant_a)
    assert result | {"checkpoint": None} == {
        "ok": True,
        "entries": AuditEvent.objects.filter(tenant=tenant_a).count(),
        "first_bad_id": None,
        "reason": None,
        "checkpoint": None,
    }


def _without_guard():
    """On PostgreSQL the trigger refuses any rewrite; a tamper test switches it off for this
    test's transaction (as only a database superuser could)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")


def test_verify_names_the_first_entry_changed_behind_the_consoles_back(tenant_a):
    made = [entry(tenant_a, n) for n in range(4)]
    audit_seal_due()
    _without_guard()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE console_auditevent SET action = 'budget.created' WHERE id = %s", [made[2].pk]
        )
    result = audit_verify(tenant=tenant_a)
    assert result["ok"] is False and result["first_bad_id"] == made[2].wire_id


def test_verify_notices_a_removed_entry(tenant_a):
    made = [entry(tenant_a, n) for n in range(4)]
    audit_seal_due()
    _without_guard()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM console_auditevent WHERE id = %s", [made[1].pk])
    result = audit_verify(tenant=tenant_a)
    assert result["ok"] is False and result["first_bad_id"] == made[2].wire_id


def test_no_orm_path_updates_or_deletes_an_entry(tenant_a):
    made = entry(tenant_a)
    with pytest.raises(AppendOnly):
        AuditEvent.objects.filter(pk=made.pk).update(action="x")
    with pytest.raises(AppendOnly):
        AuditEvent.objects.filter(pk=made.pk).delete()
    with pytest.raises(AppendOnly):
        AuditEvent.objects.all().delete()
    with pytest.raises(AppendOnly):
        made.save()
    with pytest.raises(AppendOnly):
        made.delete()
    made.action = "x"
    with pytest.raises(AppendOnly), transaction.atomic():  # bulk_update's own atomic block
        AuditEvent.objects.bulk_update([made], ["action"])
    assert AuditEvent.objects.get(pk=made.pk).action == "budget.updated"


def test_django_admin_shows_entries_read_only(tenant_a, rf, admin_user):
    model_admin = site._registry[AuditEvent]
    request = rf.get("/admin/console/auditevent/")
    request.user = admin_user
    obj = entry(tenant_a)
    assert model_admin.has_view_permission(request, obj)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, obj)
    assert not model_admin.has_delete_permission(request, obj)
    assert not model_admin.get_actions(request)  # not even "delete selected"


@pytest.mark.postgres
def test_on_postgres_a_trigger_refuses_raw_update_and_delete(tenant_a):
    made = entry(tenant_a)
    audit_seal_due()
    for sql in (
        "UPDATE console_auditevent SET action = 'forged' WHERE id = %s",
        "UPDATE console_auditevent SET hash = NULL WHERE id = %s",
        "DELETE FROM console_auditevent WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, [made.pk])
    assert AuditEvent.objects.get(pk=made.pk).action == "budget.updated"


@pytest.mark.postgres
def test_on_postgres_the_trigger_allows_only_sealing_an_unsealed_entry(tenant_a):
    made = entry(tenant_a)
    with (
        pytest.raises(DatabaseError, match="append-only"),  # sealing that also rewrites
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "UPDATE console_auditevent SET hash = 'x', action = 'forged' WHERE id = %s", [made.pk]
        )
    assert audit_seal_due() >= 1  # the seal itself passes the trigger
    assert AuditEvent.objects.get(pk=made.pk).hash is not None


def test_audit_many_stores_what_audit_stores_and_both_verify(tenant_a):
    """audit_many's one INSERT (on PostgreSQL one JSON parameter, console.core.rows) stores
    each entry exactly as `audit` stores it — odd values included — and the writer's tag of
    each holds when sealed and verified."""
    odd = {
        "text": 'é ✓ "quoted" \\ back\nslash',
        "big": 2**70,  # beyond 64 bits: the standard encoder's path
        "float": 1.5e-7,
        "nested": [{"a": None, "b": [1, "2", {"c": True}]}],
        "empty": {},
    }
    fields = {"action": "budget.updated", "object_type": "budget", "data": odd}
    one = audit(tenant=tenant_a, object_id="bud_one", ip="10.0.0.1", user_agent='ua "x"', **fields)
    audit_many(
        [
            {
                "tenant": tenant_a,
                "object_id": f"bud_many_{n}",
                "ip": "10.0.0.1",
                "user_agent": 'ua "x"',
                **fields,
            }
            for n in range(2)
        ]  # fmt: skip
    )
    many = list(AuditEvent.objects.filter(object_id__startswith="bud_many_").order_by("pk"))
    assert [m.object_id for m in many] == ["bud_many_0", "bud_many_1"]
    for stored in many:
        assert stored.data == AuditEvent.objects.get(pk=one.pk).data == odd
        assert (stored.ip, stored.user_agent, stored.tenant_id) == (
            "10.0.0.1",
            'ua "x"',
            tenant_a.pk,
        )
        assert stored.public_id and stored.writer_tag and stored.public_id != one.public_id
    assert audit_seal(tenant_id=tenant_a.pk) >= 2
    assert audit_verify(tenant=tenant_a)["ok"] is True
