"""Issue 18: a run's verdicts and trace ids move out of its row (two JSON values every batch
rewrote whole) into rows of their own, TurnVerdict (the verdict each turn holds) and RunTrace.
The data moves with them, both ways: reversing puts the JSON back from the rows."""

import django.db.models.deletion
from django.db import migrations, models

SEVERITY = {"allowed": 0, "flagged": 1, "blocked": 2}  # runs.models.VERDICT_SEVERITY
CHUNK = 5000


def _in_chunks(model, rows):
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) >= CHUNK:
            model.objects.bulk_create(batch)
            batch = []
    if batch:
        model.objects.bulk_create(batch)


def rows_from_json(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    TurnVerdict = apps.get_model("runs", "TurnVerdict")
    RunTrace = apps.get_model("runs", "RunTrace")
    held = Run.objects.order_by("id").values_list("id", "verdicts", "trace_ids")

    def verdicts():
        for run_id, by_turn, _ in held.iterator(chunk_size=2000):
            for turn, v in (by_turn or {}).items() if isinstance(by_turn, dict) else ():
                if isinstance(v, dict) and v.get("verdict") in SEVERITY:
                    yield TurnVerdict(
                        run_id=run_id,
                        turn=str(turn),
                        severity=SEVERITY[v["verdict"]],
                        verdict=v["verdict"],
                        guard=v.get("guard") or "",
                        reason=v.get("reason") or "",
                    )

    def traces():
        for run_id, _, trace_ids in held.iterator(chunk_size=2000):
            seen = set()
            for trace_id in trace_ids if isinstance(trace_ids, list) else ():
                if isinstance(trace_id, str) and trace_id not in seen:
                    seen.add(trace_id)
                    yield RunTrace(run_id=run_id, trace_id=trace_id)

    _in_chunks(TurnVerdict, verdicts())
    _in_chunks(RunTrace, traces())


def json_from_rows(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    TurnVerdict = apps.get_model("runs", "TurnVerdict")
    RunTrace = apps.get_model("runs", "RunTrace")
    verdicts, traces = {}, {}
    for run_id, turn, verdict, guard, reason in TurnVerdict.objects.order_by("id").values_list(
        "run_id", "turn", "verdict", "guard", "reason"
    ):
        verdicts.setdefault(run_id, {})[turn] = {
            "verdict": verdict,
            "guard": guard,
            "reason": reason,
        }
    for run_id, trace_id in RunTrace.objects.order_by("id").values_list("run_id", "trace_id"):
        traces.setdefault(run_id, []).append(trace_id)
    for run_id in verdicts.keys() | traces.keys():
        Run.objects.filter(pk=run_id).update(
            verdicts=verdicts.get(run_id, {}), trace_ids=traces.get(run_id, [])
        )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0003_usage_rollups_rebuild"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunTrace",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("trace_id", models.CharField(max_length=255)),
                ("run", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="traces", to="runs.run")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("run", "trace_id"), name="runtrace_unique")],
            },
        ),
        migrations.CreateModel(
            name="TurnVerdict",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("turn", models.CharField(max_length=32)),
                ("severity", models.PositiveSmallIntegerField()),
                ("verdict", models.CharField(max_length=16)),
                ("guard", models.CharField(blank=True, max_length=255)),
                ("reason", models.TextField(blank=True)),
                ("run", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="turn_verdicts", to="runs.run")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("run", "turn"), name="turnverdict_unique")],
            },
        ),
        migrations.RunPython(rows_from_json, json_from_rows),
        migrations.RemoveField(model_name="run", name="trace_ids"),
        migrations.RemoveField(model_name="run", name="verdicts"),
    ]
