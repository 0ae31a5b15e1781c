from django.apps import AppConfig


class RetentionConfig(AppConfig):
    """Bounded data (issue #27): each tenant's retention policy, the pruner the worker and
    `manage.py prune` run in small batches, and the exports of a run and of a tenant."""

    name = "retention"
    verbose_name = "Gavel retention and export"
