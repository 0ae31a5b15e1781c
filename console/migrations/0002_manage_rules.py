"""v1.1: the `manage_rules` capability. Existing tenants' `admin` and `lead` roles gain it
(new tenants get it from DEFAULT_ROLES)."""

from django.db import migrations

CAPABILITY = "manage_rules"
ROLES = ("admin", "lead")


def grant(apps, schema_editor):
    Role = apps.get_model("console", "Role")
    for role in Role.objects.filter(name__in=ROLES):
        if CAPABILITY not in role.capabilities:
            role.capabilities = [*role.capabilities, CAPABILITY]
            role.save(update_fields=["capabilities"])


def revoke(apps, schema_editor):
    Role = apps.get_model("console", "Role")
    for role in Role.objects.filter(name__in=ROLES):
        if CAPABILITY in role.capabilities:
            role.capabilities = [c for c in role.capabilities if c != CAPABILITY]
            role.save(update_fields=["capabilities"])


class Migration(migrations.Migration):
    dependencies = [("console", "0001_initial")]

    operations = [migrations.RunPython(grant, revoke)]
