"""Team leads (a lead is a member too) and the wire id of API keys (`key_...`), given to every
existing key one by one: a unique column cannot take one callable default for all rows."""

import secrets

from django.db import migrations, models

import console.models


def give_key_ids(apps, schema_editor):
    ApiKey = apps.get_model("console", "ApiKey")
    for key in ApiKey.objects.filter(public_id__isnull=True).only("pk"):
        ApiKey.objects.filter(pk=key.pk).update(public_id="key_" + secrets.token_hex(12))


class Migration(migrations.Migration):
    dependencies = [("console", "0005_manage_settings")]

    operations = [
        migrations.AddField(
            model_name="team",
            name="leads",
            field=models.ManyToManyField(
                blank=True, related_name="led_teams", to="console.principal"
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="public_id",
            field=models.CharField(max_length=32, null=True),
        ),
        migrations.RunPython(give_key_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apikey",
            name="public_id",
            field=models.CharField(
                default=console.models.new_key_id, max_length=32, unique=True
            ),
        ),
    ]
