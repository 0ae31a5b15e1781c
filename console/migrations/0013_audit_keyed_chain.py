"""The audit chain anchored outside the database (finding L7) and public ids that tell
nothing of other tenants (finding L2).

Entries get a random public id and the writer's tag (columns null for the entries before);
signed checkpoints get a table. Entries still unsealed are sealed as before (legacy SHA-256),
then each tenant's chain head gets a first checkpoint, signed with the key the database does
not hold, that says where keyed hashing begins (`keyedFrom`: the next position). On
PostgreSQL triggers also refuse an INSERT that is sealed or lacks the writer's tag, every
UPDATE and DELETE of a checkpoint, and TRUNCATE of either table (but by a superuser, who can
switch any trigger off anyway: the test suite's flush).

Run it with the console's own SECRET_KEY / GAVEL_AUDIT_KEY: it signs with them.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models
from django.utils import timezone

from console.core import auditchain


def seal_and_anchor(apps, schema_editor):
    AuditEvent = apps.get_model("console", "AuditEvent")
    AuditCheckpoint = apps.get_model("console", "AuditCheckpoint")
    Tenant = apps.get_model("console", "Tenant")
    for tenant in Tenant.objects.order_by("pk"):
        chain = AuditEvent.objects.filter(tenant=tenant)
        head = chain.filter(hash__isnull=False).order_by("-chain_seq")
        seq, prev = head.values_list("chain_seq", "hash").first() or (0, None)
        pending = chain.filter(hash__isnull=True).order_by("pk").values(*auditchain.FIELDS)
        for row in pending.iterator(chunk_size=500):
            seq += 1
            row["chain_seq"] = seq
            digest = auditchain.entry_hash(row, prev)
            AuditEvent.objects.filter(pk=row["id"]).update(
                chain_seq=seq, prev_hash=prev, hash=digest
            )
            prev = digest
        if seq == 0:
            continue  # an empty chain: every entry will be keyed (keyedFrom 1, the default)
        at = timezone.now()
        statement = auditchain.checkpoint_statement(
            tenant=tenant.slug, position=seq, head_hash=prev, at=at, keyed_from=seq + 1, by="upgrade"
        )
        key_id, signature = auditchain.sign(statement)
        AuditCheckpoint.objects.create(
            tenant=tenant,
            at=at,
            position=seq,
            head_hash=prev,
            statement=statement,
            key_id=key_id,
            signature=signature,
        )


GUARD = """
CREATE FUNCTION console_auditevent_insert_guard() RETURNS trigger AS $$
BEGIN
    IF NEW.hash IS NULL AND NEW.chain_seq IS NULL AND NEW.prev_hash IS NULL
       AND NEW.public_id IS NOT NULL AND NEW.writer_tag IS NOT NULL THEN
        RETURN NEW;  -- unsealed, with a writer's tag (whether it holds, only the console knows)
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = 'audit events are inserted unsealed by the console (INSERT refused)',
        ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER console_auditevent_insert_guard
    BEFORE INSERT ON console_auditevent
    FOR EACH ROW EXECUTE FUNCTION console_auditevent_insert_guard();

CREATE FUNCTION console_auditcheckpoint_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION USING
        MESSAGE = 'audit checkpoints are append-only (' || TG_OP || ' refused)',
        ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER console_auditcheckpoint_append_only
    BEFORE UPDATE OR DELETE ON console_auditcheckpoint
    FOR EACH ROW EXECUTE FUNCTION console_auditcheckpoint_append_only();

CREATE FUNCTION console_audit_truncate_guard() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND rolsuper) THEN
        RETURN NULL;  -- a superuser may switch any trigger off anyway (the tests' flush)
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = TG_TABLE_NAME || ' is append-only (TRUNCATE refused)',
        ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER console_auditevent_truncate_guard
    BEFORE TRUNCATE ON console_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION console_audit_truncate_guard();
CREATE TRIGGER console_auditcheckpoint_truncate_guard
    BEFORE TRUNCATE ON console_auditcheckpoint
    FOR EACH STATEMENT EXECUTE FUNCTION console_audit_truncate_guard();
"""
UNGUARD = """
DROP TRIGGER IF EXISTS console_auditcheckpoint_truncate_guard ON console_auditcheckpoint;
DROP TRIGGER IF EXISTS console_auditevent_truncate_guard ON console_auditevent;
DROP FUNCTION IF EXISTS console_audit_truncate_guard();
DROP TRIGGER IF EXISTS console_auditcheckpoint_append_only ON console_auditcheckpoint;
DROP FUNCTION IF EXISTS console_auditcheckpoint_append_only();
DROP TRIGGER IF EXISTS console_auditevent_insert_guard ON console_auditevent;
DROP FUNCTION IF EXISTS console_auditevent_insert_guard();
"""


def guard(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(GUARD)


def unguard(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNGUARD)


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0012_sso_domain_verification"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditCheckpoint",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(default=django.utils.timezone.now)),
                ("position", models.BigIntegerField()),
                ("head_hash", models.CharField(blank=True, max_length=64, null=True)),
                ("statement", models.TextField()),
                ("key_id", models.CharField(max_length=16)),
                ("signature", models.CharField(max_length=100)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="console.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["tenant", "-id"], name="audit_checkpoint_tenant")
                ],
            },
        ),
        migrations.AddField(
            model_name="auditevent",
            name="public_id",
            field=models.CharField(blank=True, max_length=32, null=True),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="writer_tag",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.UniqueConstraint(
                fields=("tenant", "public_id"), name="audit_public_id_unique"
            ),
        ),
        migrations.RunPython(seal_and_anchor, migrations.RunPython.noop),
        migrations.RunPython(guard, unguard),
    ]
