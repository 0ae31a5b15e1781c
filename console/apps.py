from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Gavel console"

    def ready(self):
        # Socket hygiene: sign-out and deactivation close the user's sockets (receivers there);
        # every sign-in records its time in the session (console.signin's receiver); the sweep
        # seals audit entries whose commit-time seal was skipped (console.services.auditlog).
        from console import checks, outbox, realtime, signin  # noqa: F401
        from console.services import auditlog

        outbox.register(
            outbox.Sender(
                name="audit entries sealed",
                run_due=auditlog.audit_seal_due,
                next_due=lambda: None,  # sealed on commit; the sweep only catches up
            )
        )
