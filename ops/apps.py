from django.apps import AppConfig
from django.core.signals import request_finished


class OpsConfig(AppConfig):
    name = "ops"
    label = "ops"
    verbose_name = "Operations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from ops import telemetry

        telemetry.setup()  # Sentry / OpenTelemetry when configured (off otherwise)
        request_finished.connect(_request_over, dispatch_uid="ops.request_over")


def _request_over(**kwargs):
    """A thread that served a request (WSGI, the test client) logs outside one afterwards."""
    from ops.context import request_id

    request_id.set(None)
