from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self):
        # A tenant's time zone change rebuilds its usage rollups (the receiver is there).
        from runs.services import usage  # noqa: F401
