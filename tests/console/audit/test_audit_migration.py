"""console/0008_audit_chain: existing entries keep their meaning (before/after and a rule actor
move out of `data` into columns) and are chained, so verify passes on an upgraded log."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from console.audit.log import audit_verify
from console.models import AuditEvent, Tenant

BEFORE = [("console", "0007_user_sessions")]
AFTER = [("console", "0008_audit_chain")]


@pytest.mark.django_db(transaction=True)
def test_existing_entries_move_into_columns_and_are_chained():
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(BEFORE)
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        tenant = old.get_model("console", "Tenant").objects.create(slug="old", name="Old")
        events = old.get_model("console", "AuditEvent").objects
        changed = events.create(
            tenant=tenant,
            action="budget.updated",
            object_type="budget",
            object_id="bud_1",
            data={"before": {"c": 1}, "after": {"c": 2}, "note": "kept"},
        )
        ruled = events.create(
            tenant=tenant,
            action="approval.decided",
            object_type="approval",
            object_id="apr_1",
            data={"actorRuleId": "rul_1", "status": "approved"},
        )

        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        executor.loader.build_graph()
        executor.migrate(latest)

        moved = AuditEvent.objects.get(pk=changed.pk)
        assert (moved.before, moved.after, moved.data) == ({"c": 1}, {"c": 2}, {"note": "kept"})
        rule = AuditEvent.objects.get(pk=ruled.pk)
        assert rule.actor_rule == "rul_1" and rule.data == {"status": "approved"}
        assert (moved.chain_seq, rule.chain_seq) == (1, 2) and rule.prev_hash == moved.hash
        result = audit_verify(tenant=Tenant.objects.get(slug="old"))
        assert {k: result[k] for k in ("ok", "entries", "first_bad_id")} == {
            "ok": True,
            "entries": 2,
            "first_bad_id": None,
        }
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
