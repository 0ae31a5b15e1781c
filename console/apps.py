from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Gavel console"

    def ready(self):
        # Socket hygiene: sign-out and deactivation close the user's sockets (receivers there);
        # every sign-in records its time in the session (console.signin's receiver); audit
        # entries are sealed into their tenant's chain by the outbox thread and the sweep.
        from console import checks, outbox, realtime, signin  # noqa: F401
        from console.services import auditlog

        outbox.register(
            outbox.Sender(
                name="audit entries sealed",
                run_due=auditlog.audit_seal_due,
                next_due=lambda: None,  # woken on commit; nothing waits for a time
            )
        )
