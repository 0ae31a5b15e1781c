"""`manage.py prune`: apply every tenant's retention policy now, in small batches, until
nothing is due (the worker does the same a step at a time: retention.prune.prune_once)."""

from django.core.management.base import BaseCommand, CommandError

from retention.prune import BATCH, DUTY, prune_all


class Command(BaseCommand):
    help = "Delete what each tenant's retention policy no longer keeps, in small batches."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=BATCH, help="rows per step (default 500)")
        parser.add_argument(
            "--pause", type=float, default=0.0, help="seconds to wait between steps (default 0)"
        )
        parser.add_argument(
            "--duty",
            type=float,
            default=DUTY,
            help="the share of wall time pruning may take, 0..1 (default 0.15: it rests 5.7 "
            "times as long as each step took)",
        )
        parser.add_argument("--max-steps", type=int, default=None, help="stop after N steps")

    def handle(self, *args, batch, pause, duty, max_steps, **options):
        if batch < 1 or batch > 10_000:
            raise CommandError("--batch must be between 1 and 10000")
        if pause < 0 or (max_steps is not None and max_steps < 1):
            raise CommandError("--pause must be >= 0 and --max-steps >= 1")
        if not 0 < duty <= 1:
            raise CommandError("--duty must be more than 0 and at most 1")
        total: dict = {}
        steps = 0
        for done in prune_all(batch=batch, pause=pause, duty=duty, limit=max_steps):
            steps += 1
            for name, count in done.items():
                total[name] = total.get(name, 0) + count
        if not total:
            self.stdout.write("Nothing to prune.")
            return
        summary = ", ".join(f"{name} {count}" for name, count in sorted(total.items()))
        self.stdout.write(f"Pruned in {steps} steps: {summary}.")
