"""Webhooks get a public id (`whk_…`, for the management API) and a format (`gavel`)."""

import secrets

from django.db import migrations, models

import approvals.models


def fill_public_ids(apps, schema_editor):
    Webhook = apps.get_model("approvals", "Webhook")
    for webhook in Webhook.objects.filter(public_id__isnull=True).only("pk"):
        Webhook.objects.filter(pk=webhook.pk).update(public_id="whk_" + secrets.token_hex(12))


class Migration(migrations.Migration):

    dependencies = [
        ("approvals", "0002_extension_webhooks"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhook",
            name="public_id",
            field=models.CharField(max_length=32, null=True),
        ),
        migrations.RunPython(fill_public_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="webhook",
            name="public_id",
            field=models.CharField(
                default=approvals.models.new_webhook_id, max_length=32, unique=True
            ),
        ),
        migrations.AddField(
            model_name="webhook",
            name="format",
            field=models.CharField(
                choices=[("gavel", "Gavel")], default="gavel", max_length=16
            ),
        ),
    ]
