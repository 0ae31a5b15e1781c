"""`manage.py worker`: the console's background work, forever (ops/worker.py). `--once`: one
pass, then exit (cron, tests)."""

from django.core.management.base import BaseCommand, CommandError

from ops.worker import Worker


def report(counts: dict[str, int]) -> str:
    counts = dict(counts)
    done = (
        f"expired {counts.pop('expired')} approvals, sent {counts.pop('reminded')} reminders "
        f"and {counts.pop('escalated')} escalations"
    )
    return done + ", attempted " + ", ".join(f"{n} {name}" for name, n in counts.items())


class Command(BaseCommand):
    help = (
        "Run the worker: expiry, reminders, escalations, digests, mail, and webhook and Slack "
        "retries. Survives lost database, Redis and SMTP connections; exits on SIGTERM after "
        "the item in hand."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval", type=float, default=1.0, help="seconds between idle passes (default 1)"
        )
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, interval=1.0, once=False, **options):
        if interval <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        if once:
            from notifications.sweep import sweep

            self.stdout.write(report(sweep()))
            return

        def out(counts):
            self.stdout.write(report(counts))
            self.stdout.flush()

        worker = Worker(interval=interval, out=out)
        worker.install_signals()
        worker.run()
