"""Rollups become rebuildable: the usage that no Step carries (snapshots' and outcomes' growth)
is kept as UsageAdjustment rows from now on; for the runs held before, each run's share of it
is derived once (its usage by model minus its steps', dated at the run's finish, else its last
update), and every tenant's rollups are then rebuilt from steps and adjustments, each on its
tenant-local day."""

from types import SimpleNamespace

from django.db import migrations
from django.db.models import Count, Sum

from runs.services.usage import rollups_rebuild, zone_name

CHUNK = 2000
FIELDS = ("input_tokens", "output_tokens", "cost_minor_units")


def _residuals(apps):
    Run = apps.get_model("runs", "Run")
    Step = apps.get_model("runs", "Step")
    Adjustment = apps.get_model("runs", "UsageAdjustment")
    ids = list(Run.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        finished = Step.objects.filter(run_id__in=chunk, finished_at__isnull=False)
        counted = {
            (r["run_id"], r["model"]): r
            for r in finished.values("run_id", "model").annotate(**{f: Sum(f) for f in FIELDS})
        }
        rows = dict(
            Step.objects.filter(run_id__in=chunk)
            .values("run_id")
            .annotate(n=Count("pk"))
            .values_list("run_id", "n")
        )
        adjustments = []
        runs = Run.objects.filter(pk__in=chunk).values(
            "pk", "usage_by_model", "steps", "finished_at", "updated_at"
        )
        for run in runs:
            at = run["finished_at"] or run["updated_at"]
            extra_steps = max(0, run["steps"] - rows.get(run["pk"], 0))
            for model, usage in sorted((run["usage_by_model"] or {}).items()):
                held = counted.get((run["pk"], model), {})
                delta = {f: int(usage.get(f, 0) or 0) - (held.get(f) or 0) for f in FIELDS}
                if any(delta.values()) or extra_steps:
                    adjustments.append(
                        Adjustment(
                            run_id=run["pk"], at=at, model=model, steps=extra_steps, **delta
                        )
                    )
                    extra_steps = 0
            if extra_steps:
                adjustments.append(Adjustment(run_id=run["pk"], at=at, steps=extra_steps))
        Adjustment.objects.bulk_create(adjustments, batch_size=1000)


def forwards(apps, schema_editor):
    _residuals(apps)
    models = SimpleNamespace(
        Step=apps.get_model("runs", "Step"),
        UsageAdjustment=apps.get_model("runs", "UsageAdjustment"),
        Run=apps.get_model("runs", "Run"),
        Agent=apps.get_model("runs", "Agent"),
        Principal=apps.get_model("console", "Principal"),
        UsageDaily=apps.get_model("runs", "UsageDaily"),
    )
    for tenant_id, zone in apps.get_model("console", "Tenant").objects.values_list(
        "pk", "time_zone"
    ):
        rollups_rebuild(tenant_id=tenant_id, zone=zone_name(zone), m=models)


def backwards(apps, schema_editor):
    apps.get_model("runs", "UsageAdjustment").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("runs", "0002_usageadjustment"), ("console", "0002_manage_rules")]

    operations = [migrations.RunPython(forwards, backwards)]
