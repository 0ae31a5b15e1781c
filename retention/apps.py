from django.apps import AppConfig


class RetentionConfig(AppConfig):
    """Bounded data (issue #27): each tenant's retention policy, the pruner the worker and
    `manage.py prune` run in small batches, and the exports of a run and of a tenant."""

    name = "retention"
    verbose_name = "Gavel retention and export"

    def ready(self):
        # The sweep / worker prunes a batch per pass while a backlog lasts, else looks once a
        # minute (retention.prune.prune_due); never a server's outbox thread.
        from console.core import outbox
        from retention import prune

        outbox.register(
            outbox.Sender(
                name="retention",
                run_due=prune.prune_due,
                next_due=lambda: None,
                sweep_only=True,
            )
        )
