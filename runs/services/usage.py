"""Rebuilding the usage rollups (`UsageDaily`) from the figures they sum: every finished Step
and every UsageAdjustment (the usage of snapshots and outcomes that no step carries); and
the rollups by one dimension (`UsageDailyBy`) from those.

The rollup's day is the tenant-local day, so a tenant whose time zone changes must rebuild
(in the transaction that changes it). Ingest only ever adds to rollups (one upsert per batch);
this is the one writer that replaces them.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from zoneinfo import ZoneInfo

from django.db import connection, transaction
from django.dispatch import receiver
from django.utils import timezone

from console.directory.services.tenant import tenant_time_zone_changed
from console.models import Principal, Tenant
from runs.models import (
    USAGE_BY_COLUMNS,
    Agent,
    Run,
    Step,
    UsageAdjustment,
    UsageDaily,
    UsageDailyBy,
)

LIVE_MODELS = SimpleNamespace(
    Step=Step,
    UsageAdjustment=UsageAdjustment,
    Run=Run,
    Agent=Agent,
    Principal=Principal,
    UsageDaily=UsageDaily,
    UsageDailyBy=UsageDailyBy,
)
SUMS = ("input_tokens", "output_tokens", "cost_minor_units", "steps")


def zone_name(name: str | None) -> str:
    """The tenant's IANA zone, or UTC for one this server does not know."""
    try:
        ZoneInfo(name or "UTC")
    except (KeyError, ValueError):
        return "UTC"
    return name or "UTC"


@transaction.atomic
def usage_rollups_rebuild(*, tenant: Tenant) -> int:
    """Replace the tenant's rollups by the sums of its steps and adjustments, each on the
    tenant-local day of its finish (`at`). Returns the number of rollup rows."""
    return rollups_rebuild(tenant_id=tenant.pk, zone=zone_name(tenant.time_zone), m=LIVE_MODELS)


def rollups_rebuild(*, tenant_id: int, zone: str, m=LIVE_MODELS) -> int:
    """`usage_rollups_rebuild` over a set of models (`m`: the live ones, or a migration's;
    one from before `UsageDailyBy` rebuilds `UsageDaily` only)."""
    if connection.vendor == "postgresql":
        rows = _rebuild_sql(tenant_id=tenant_id, zone=zone, m=m)
    else:
        rows = _rebuild_python(tenant_id=tenant_id, zone=zone, m=m)
    if hasattr(m, "UsageDailyBy"):
        usage_by_rebuild(tenant_id=tenant_id, m=m)
    return rows


def usage_by_rebuild(*, tenant_id: int, m=LIVE_MODELS) -> int:
    """Replace the tenant's `UsageDailyBy` rows by the sums of its `UsageDaily` rows per day
    and dimension's key: one DELETE and one INSERT ... SELECT (PostgreSQL and SQLite). Run
    where `UsageDaily` was replaced (its rebuild holds the table lock that keeps ingest's
    additions out meanwhile). Returns the number of rows."""
    by = connection.ops.quote_name(m.UsageDailyBy._meta.db_table)
    daily = connection.ops.quote_name(m.UsageDaily._meta.db_table)
    sums = ", ".join(f"SUM({s})" for s in SUMS)
    selects = " UNION ALL ".join(
        f"SELECT tenant_id, '{dimension}', day, {column}, {sums} FROM {daily} "  # noqa: S608
        f"WHERE tenant_id = %s GROUP BY tenant_id, day, {column}"
        for dimension, column in USAGE_BY_COLUMNS.items()
    )
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {by} WHERE tenant_id = %s", [tenant_id])  # noqa: S608
        # Identifiers come from the models and the fixed map; the tenant is a parameter.
        cursor.execute(
            f"INSERT INTO {by} (tenant_id, dimension, day, key, {', '.join(SUMS)}) {selects}",  # noqa: S608
            [tenant_id] * len(USAGE_BY_COLUMNS),
        )
        return cursor.rowcount


def _rebuild_sql(*, tenant_id: int, zone: str, m) -> int:
    """One DELETE and one INSERT ... SELECT ... GROUP BY, under a table lock that lets
    readers through but no writer: a batch that has already added to the rollups holds its
    row lock, so the rebuild waits for it to commit and then reads its steps; one that has
    not added yet waits for the rebuild and then adds its delta to the rebuilt rows. Either
    way its usage counts once."""
    t = {name: connection.ops.quote_name(getattr(m, name)._meta.db_table) for name in vars(m)}
    with connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {t['UsageDaily']} IN SHARE ROW EXCLUSIVE MODE")
        cursor.execute(f"DELETE FROM {t['UsageDaily']} WHERE tenant_id = %s", [tenant_id])  # noqa: S608
        # Identifiers come from the models; every value is a parameter.
        cursor.execute(
            f"""
            INSERT INTO {t["UsageDaily"]}
                (tenant_id, day, principal_id, agent_id, model,
                 input_tokens, output_tokens, cost_minor_units, steps)
            SELECT r.tenant_id, (u.at AT TIME ZONE %s)::date, COALESCE(p.external_id, ''),
                   a.external_id, u.model, SUM(u.input_tokens), SUM(u.output_tokens),
                   SUM(u.cost_minor_units), SUM(u.steps)
            FROM (
                SELECT run_id, finished_at AS at, model, input_tokens, output_tokens,
                       cost_minor_units, 1 AS steps
                FROM {t["Step"]} WHERE finished_at IS NOT NULL
                UNION ALL
                SELECT run_id, at, model, input_tokens, output_tokens, cost_minor_units, steps
                FROM {t["UsageAdjustment"]}
            ) u
            JOIN {t["Run"]} r ON r.id = u.run_id
            JOIN {t["Agent"]} a ON a.id = r.agent_id
            LEFT JOIN {t["Principal"]} p ON p.id = r.principal_id
            WHERE r.tenant_id = %s
            GROUP BY r.tenant_id, 2, 3, 4, 5
            """,  # noqa: S608
            [zone, tenant_id],
        )
        return cursor.rowcount


def _rebuild_python(*, tenant_id: int, zone: str, m) -> int:
    """The same sums for SQLite (no time zones in its SQL). Its writers are serialized
    (BEGIN IMMEDIATE), so no lock is needed."""
    tz = ZoneInfo(zone)
    runs = {
        r["id"]: (r["principal__external_id"] or "", r["agent__external_id"])
        for r in m.Run.objects.filter(tenant_id=tenant_id).values(
            "id", "principal__external_id", "agent__external_id"
        )
    }
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    fields = ("run_id", "model", "input_tokens", "output_tokens", "cost_minor_units")
    steps = m.Step.objects.filter(run__tenant_id=tenant_id, finished_at__isnull=False)
    adjustments = m.UsageAdjustment.objects.filter(run__tenant_id=tenant_id)
    for row in (
        *steps.values_list(*fields, "finished_at").iterator(),
        *adjustments.values_list(*fields, "at", "steps").iterator(),
    ):
        run_id, model, i, o, c, at = row[:6]
        principal_id, agent_id = runs[run_id]
        key = (timezone.localtime(at, tz).date(), principal_id, agent_id, model)
        total = sums[key]
        for n, value in enumerate((i, o, c, row[6] if len(row) > 6 else 1)):
            total[n] += value
    m.UsageDaily.objects.filter(tenant_id=tenant_id).delete()
    m.UsageDaily.objects.bulk_create(
        [
            m.UsageDaily(
                tenant_id=tenant_id,
                day=day,
                principal_id=principal_id,
                agent_id=agent_id,
                model=model,
                **dict(zip(SUMS, total, strict=True)),
            )
            for (day, principal_id, agent_id, model), total in sums.items()
        ],
        batch_size=1000,
    )
    return len(sums)


@receiver(tenant_time_zone_changed, dispatch_uid="gavel-usage-time-zone")
def _time_zone_changed(sender, tenant, **kwargs):
    """A tenant's days moved: rebuild its rollups in the transaction that moved them."""
    usage_rollups_rebuild(tenant=tenant)
