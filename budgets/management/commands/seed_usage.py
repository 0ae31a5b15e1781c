"""`manage.py seed_usage --tenant SLUG --steps N [--days 90]`: usage for the budgets pages, fast.

It writes the usage rollups (runs.UsageDaily) that ingesting N finished steps spread over the
last D tenant-local days would have produced — one row per (day, principal, agent, model) with
the sums of its steps — in bulk, bypassing the ingest services on purpose (volume test data for
bench/pages.py, screenshots and demos: nothing is published, audited or alerted; the steps
themselves are not written). It replaces the tenant's rollups. The tenant, its principals (in
teams) and agents are made if missing. Deterministic for a given --seed. Weekdays are busier
than weekends, usage grows over the period, some principals spend far more than others, and the
large model costs most.
"""

from __future__ import annotations

import random
from datetime import timedelta
from zoneinfo import available_timezones

from babel.numbers import is_currency
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from budgets import rules
from console.directory.services import tenant_create
from console.models import Principal, Team, Tenant
from runs.models import Agent, UsageDaily, UsageDailyBy

TEAMS = ("support", "billing", "research", "platform")
AGENTS = ("support-bot", "billing-bot", "research-agent", "triage", "sql-analyst")
# model: (input tokens, output tokens, cost per 1,000 tokens in minor units x 100)
MODELS = {
    "model-large": (2400, 520, 110),
    "model-small": (1500, 260, 12),
    "model-fallback": (1800, 300, 35),
}
FIRST_NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "ken", "lena", "mallory", "nina", "oscar", "peggy", "quinn", "rita", "sam", "trent",
)  # fmt: skip
CHUNK = 5000


def _principals(tenant, count: int, rng: random.Random) -> list[str]:
    """`count` principals, each in one team (every fifth in two, every seventh in none)."""
    teams = {name: Team.objects.get_or_create(tenant=tenant, name=name)[0] for name in TEAMS}
    ids = []
    for n in range(count):
        first = FIRST_NAMES[n % len(FIRST_NAMES)]
        suffix = "" if n < len(FIRST_NAMES) else str(n // len(FIRST_NAMES))
        external_id = f"{first}{suffix}@example.com"
        principal, _ = Principal.objects.get_or_create(
            tenant=tenant,
            external_id=external_id,
            defaults={"name": f"{first.title()} {suffix}".strip(), "reviewed": True},
        )
        if n % 7 != 6:
            principal.teams.add(teams[TEAMS[n % len(TEAMS)]])
        if n % 5 == 4:
            principal.teams.add(teams[TEAMS[(n + 1) % len(TEAMS)]])
        ids.append(external_id)
    return ids


def usage_rows(*, steps: int, days: list, principals: list[str], rng: random.Random) -> dict:
    """(day, principal, agent, model) -> [input, output, cost, steps] for `steps` steps."""
    day_weights = [
        (0.35 if day.weekday() >= 5 else 1.0) * (0.6 + 0.8 * n / max(1, len(days) - 1))
        for n, day in enumerate(days)
    ]
    people = principals + [""]  # a run for no principal now and then
    people_weights = [1.0 / (1 + n) ** 0.8 for n in range(len(principals))] + [0.05]
    agent_weights = [1.0 / (1 + n) for n in range(len(AGENTS))]
    models = list(MODELS)
    rows: dict = {}
    chosen_days = rng.choices(days, weights=day_weights, k=steps)
    chosen_people = rng.choices(people, weights=people_weights, k=steps)
    chosen_agents = rng.choices(AGENTS, weights=agent_weights, k=steps)
    chosen_models = rng.choices(models, weights=(3, 5, 1), k=steps)
    for day, person, agent, model in zip(
        chosen_days, chosen_people, chosen_agents, chosen_models, strict=True
    ):
        base_in, base_out, rate = MODELS[model]
        tokens_in = int(base_in * rng.uniform(0.3, 1.7))
        tokens_out = int(base_out * rng.uniform(0.3, 1.7))
        cost = max(1, (tokens_in + 3 * tokens_out) * rate // 100_000)
        row = rows.setdefault((day, person, agent, model), [0, 0, 0, 0])
        row[0] += tokens_in
        row[1] += tokens_out
        row[2] += cost
        row[3] += 1
    return rows


class Command(BaseCommand):
    help = "Write the usage rollups that N finished steps over the last D days would produce."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--steps", type=int, required=True)
        parser.add_argument("--days", type=int, default=90)
        parser.add_argument("--principals", type=int, default=24)
        parser.add_argument("--seed", type=int, default=13)
        parser.add_argument("--time-zone", help="set the tenant's IANA zone first")
        parser.add_argument("--currency", help="set the tenant's ISO 4217 currency first")

    def handle(self, *args, **options):
        steps, day_count = options["steps"], options["days"]
        if steps < 1 or not 1 <= day_count <= 366 or options["principals"] < 1:
            raise CommandError("--steps and --principals must be >= 1, --days 1..366")
        if options["time_zone"] and options["time_zone"] not in available_timezones():
            raise CommandError(f"--time-zone: '{options['time_zone']}' is not an IANA zone")
        if options["currency"] and not is_currency(options["currency"]):
            raise CommandError(f"--currency: '{options['currency']}' is not an ISO 4217 code")
        rng = random.Random(options["seed"])
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            tenant, _ = tenant_create(slug=options["tenant"])
        changes = {name: options[name] for name in ("time_zone", "currency") if options[name]}
        if changes:  # demo data: set as given (the management API validates real changes)
            Tenant.objects.filter(pk=tenant.pk).update(**changes)
            tenant.refresh_from_db()
        today = rules.local_today(timezone.now(), rules.zone(tenant.time_zone))
        days = [today - timedelta(days=n) for n in range(day_count - 1, -1, -1)]
        with transaction.atomic():
            principals = _principals(tenant, options["principals"], rng)
            for agent in AGENTS:
                Agent.objects.get_or_create(tenant=tenant, external_id=agent)
            rows = usage_rows(steps=steps, days=days, principals=principals, rng=rng)
            items = sorted(rows.items())
            UsageDaily.objects.filter(tenant=tenant).delete()
            UsageDaily.objects.bulk_create(
                (
                    UsageDaily(
                        tenant=tenant,
                        day=day,
                        principal_id=person,
                        agent_id=agent,
                        model=model,
                        input_tokens=sums[0],
                        output_tokens=sums[1],
                        cost_minor_units=sums[2],
                        steps=sums[3],
                    )
                    for (day, person, agent, model), sums in items
                ),
                batch_size=CHUNK,
            )
            by: dict[tuple, list[int]] = {}  # the rollups by one dimension: the same sums
            for (day, person, agent, model), sums in items:
                for key in (("principal", person), ("agent", agent), ("model", model)):
                    held = by.setdefault((day, *key), [0, 0, 0, 0])
                    for n, value in enumerate(sums):
                        held[n] += value
            UsageDailyBy.objects.filter(tenant=tenant).delete()
            UsageDailyBy.objects.bulk_create(
                (
                    UsageDailyBy(
                        tenant=tenant,
                        day=day,
                        dimension=dimension,
                        key=key,
                        input_tokens=sums[0],
                        output_tokens=sums[1],
                        cost_minor_units=sums[2],
                        steps=sums[3],
                    )  # fmt: skip
                    for (day, dimension, key), sums in sorted(by.items())
                ),
                batch_size=CHUNK,
            )
        if connection.vendor == "postgresql":  # fresh statistics after a bulk load, as
            with connection.cursor() as cursor:  # autovacuum would take a while to gather
                for model in (UsageDaily, UsageDailyBy):
                    cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")
        self.stdout.write(
            f"tenant '{tenant.slug}': {steps} steps of usage over {day_count} days "
            f"({days[0]}..{days[-1]}, {tenant.time_zone}) in {len(items)} rollup rows"
        )
