"""Expire the approvals past their time (fail closed: `expired`, the rejection message), and
send what the outboxes hold that is due (webhook deliveries, mail). Once, or `--loop` every
`--interval` seconds.

Long-polls expire their own run's calls at the moment they expire and every read expires
lazily, so this sweep is for calls nobody is reading (the nav count, webhooks, the audit log).
The outboxes are also sent by each server process's own thread right after commit; the sweep
is what sends them after a crash or a restart (console/outbox.py).
"""

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from approvals.services.expiry import approvals_expire_due
from console import outbox


class Command(BaseCommand):
    help = "Expire pending approvals past their expiry and send due webhook deliveries and mail."

    def add_arguments(self, parser):
        parser.add_argument("--loop", action="store_true", help="keep sweeping until stopped")
        parser.add_argument(
            "--interval", type=float, default=1.0, help="seconds between sweeps (default 1)"
        )

    def handle(self, *args, loop=False, interval=1.0, **options):
        if interval <= 0:
            raise CommandError("--interval must be a positive number of seconds")
        while True:
            expired = approvals_expire_due()
            sent = outbox.run_due()
            if expired or any(sent.values()) or not loop:
                attempted = ", ".join(f"{n} {name}" for name, n in sent.items())
                self.stdout.write(f"expired {expired} approvals, attempted {attempted}")
            if not loop:
                return
            close_old_connections()
            time.sleep(interval)
