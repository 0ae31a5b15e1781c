"""The sweep (notifications/sweep.py): expire the approvals past their time (fail closed:
`expired`, the rejection message), send the reminders and escalations that are due (each once
per call, however many sweeps run), and send what the outboxes hold that is due (call mail,
mail, webhook deliveries). Once, or `--loop` every `--interval` seconds. `make run` starts it
beside the server; in production run one (or more: they never repeat one another's work)
`manage.py expire_approvals --loop` beside the web processes.

Long-polls expire their own run's calls at the moment they expire and every read expires
lazily, so expiry here is for calls nobody is reading (the nav count, webhooks, the audit log).
Webhook deliveries are also sent by each server process's own thread right after commit (the
sweep sends what a crash or a restart left); with `--loop` the sweep sends them (and Slack
responses) from an outbox thread of its own, polling every `--interval`, so a pass (expiry,
reminders, escalations, mail) never waits on an endpoint. Mail is the sweep's alone: the
"now" mail of new calls, digests, reminders' and alerts' mail are expanded, rendered and sent
here, never in a server process (console/outbox.py), so without a running sweep mail is
written and stays pending. A round that did work is followed at once by the next (a backlog
drains at full speed); an idle one sleeps `--interval`.
"""

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from console.core import outbox
from notifications.sweep import sweep


class Command(BaseCommand):
    help = (
        "Expire pending approvals past their expiry, send due reminders and escalations, and "
        "send due mail and webhook deliveries."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping until stopped")
        parser.add_argument(
            "--interval", type=float, default=1.0, help="seconds between sweeps (default 1)"
        )

    def handle(self, *args, loop=False, interval=1.0, **options):
        if interval <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        if not loop:
            self.stdout.write(_report(sweep()))
            return
        outbox.start(local=False, idle=interval)  # outbound HTTP: its own thread
        try:
            while True:
                counts = sweep(http=False)
                busy = any(counts.values())
                if busy:
                    self.stdout.write(_report(counts))
                    self.stdout.flush()
                close_old_connections()
                if not busy:  # more may be due at once (a backlog of mail): no sleep after work
                    time.sleep(interval)
        finally:
            outbox.stop()


def _report(counts: dict[str, int]) -> str:
    counts = dict(counts)
    done = (
        f"expired {counts.pop('expired')} approvals, sent {counts.pop('reminded')} reminders "
        f"and {counts.pop('escalated')} escalations"
    )
    return done + ", attempted " + ", ".join(f"{n} {name}" for name, n in counts.items())
