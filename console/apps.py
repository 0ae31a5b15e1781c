from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Gavel console"

    def ready(self):
        # Socket hygiene: sign-out and deactivation close the user's sockets (receivers there);
        # every sign-in records its time in the session (console.signin's receiver); the sweep
        # seals audit entries whose commit-time seal was skipped (console.services.auditlog)
        # and signs the audit chains' heads (console.services.auditcheckpoints).
        from console import checks, deploy_checks  # noqa: F401
        from console.audit import checkpoints as auditcheckpoints
        from console.audit import log as auditlog
        from console.core import outbox  # noqa: F401
        from console.directory import signin  # noqa: F401
        from console.live import realtime  # noqa: F401

        self._key_copies_follow_their_rows()

        outbox.register(
            outbox.Sender(
                name="audit entries sealed",
                run_due=auditlog.audit_seal_due,
                next_due=lambda: None,  # sealed on commit; the sweep only catches up
            )
        )
        outbox.register(
            outbox.Sender(
                name="audit checkpoints",
                run_due=auditcheckpoints.audit_checkpoint_due,
                next_due=lambda: None,
                sweep_only=True,
            )
        )

    @staticmethod
    def _key_copies_follow_their_rows() -> None:
        """A key, principal or tenant saved or deleted: the processes' copies of the API keys
        (console/directory/keycopies.py) are stale once it commits."""
        from django.db.models.signals import post_delete, post_save

        from console.directory import keycopies
        from console.models import ApiKey, Principal, Tenant

        for model in (ApiKey, Principal, Tenant):
            name = model.__name__
            post_save.connect(keycopies.bump, sender=model, dispatch_uid=f"keycopies-{name}")
            post_delete.connect(keycopies.bump, sender=model, dispatch_uid=f"keycopies-del-{name}")
