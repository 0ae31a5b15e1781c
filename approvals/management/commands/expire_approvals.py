"""Expire the approvals past their time (fail closed: `expired`, the rejection message), and
send the webhook deliveries that are due. Once, or `--loop` every `--interval` seconds.

Long-polls expire their own run's calls at the moment they expire and every read expires
lazily, so this sweep is for calls nobody is reading (the nav count, webhooks, the audit log).
"""

import time

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from approvals.services.expiry import approvals_expire_due
from approvals.services.webhooks import webhook_deliveries_run_due


class Command(BaseCommand):
    help = "Expire pending approvals past their expiry and send due webhook deliveries."

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
            sent = webhook_deliveries_run_due()
            if expired or sent or not loop:
                self.stdout.write(
                    f"expired {expired} approvals, attempted {sent} webhook deliveries"
                )
            if not loop:
                return
            close_old_connections()
            time.sleep(interval)
