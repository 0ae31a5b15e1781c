"""Retention policies (issue #27), and the audit log's one sanctioned DELETE.

On PostgreSQL the append-only trigger of console/0008 refuses every DELETE of an audit entry.
Pruning (retention/prune.py) removes a whole prefix of a tenant's chain, and only after a
signed checkpoint names that prefix (`prunedThrough`, `prunedHash`: console.auditchain), so
verify starts past it. The trigger now also lets a DELETE through when, and only when, the
entry is sealed and its position is within the `prunedThrough` of its tenant's newest
checkpoint. Anything else is refused as before: an entry outside such a prefix, an unsealed
one, any UPDATE but the seal. A checkpoint row forged to open a prefix fails its signature,
and verify reports `checkpoint_invalid`.
"""

import django.db.models.deletion
from django.db import migrations, models

ORIGINAL = """
CREATE OR REPLACE FUNCTION console_auditevent_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.hash IS NULL AND NEW.hash IS NOT NULL
       AND (to_jsonb(NEW) - 'chain_seq' - 'prev_hash' - 'hash')
         = (to_jsonb(OLD) - 'chain_seq' - 'prev_hash' - 'hash') THEN
        RETURN NEW;  -- sealing an unsealed entry into its tenant's chain, nothing else
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = 'audit events are append-only (' || TG_OP || ' refused)',
        ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""

PRUNABLE = """
CREATE OR REPLACE FUNCTION console_auditevent_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.hash IS NULL AND NEW.hash IS NOT NULL
       AND (to_jsonb(NEW) - 'chain_seq' - 'prev_hash' - 'hash')
         = (to_jsonb(OLD) - 'chain_seq' - 'prev_hash' - 'hash') THEN
        RETURN NEW;  -- sealing an unsealed entry into its tenant's chain, nothing else
    END IF;
    IF TG_OP = 'DELETE' AND OLD.hash IS NOT NULL AND OLD.chain_seq IS NOT NULL
       AND OLD.chain_seq <= COALESCE((
           SELECT (c.statement::jsonb ->> 'prunedThrough')::bigint
           FROM console_auditcheckpoint c
           WHERE c.tenant_id = OLD.tenant_id
           ORDER BY c.id DESC LIMIT 1), 0) THEN
        RETURN OLD;  -- within the pruned prefix its tenant's newest checkpoint names
    END IF;
    RAISE EXCEPTION USING
        MESSAGE = 'audit events are append-only (' || TG_OP || ' refused)',
        ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


def prunable(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PRUNABLE)


def original(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ORIGINAL)


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("console", "0013_audit_keyed_chain"),
    ]

    operations = [
        migrations.CreateModel(
            name="RetentionPolicy",
            fields=[
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="retention_policy",
                        serialize=False,
                        to="console.tenant",
                    ),
                ),
                ("run_days", models.PositiveIntegerField(blank=True, default=None, null=True)),
                ("sent_mail_days", models.PositiveIntegerField(blank=True, default=30, null=True)),
                (
                    "webhook_delivery_days",
                    models.PositiveIntegerField(blank=True, default=30, null=True),
                ),
                (
                    "read_notification_days",
                    models.PositiveIntegerField(blank=True, default=90, null=True),
                ),
                ("audit_cut_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.RunPython(prunable, original),
    ]
