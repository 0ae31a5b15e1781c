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
        _seal_at_shutdown()


def _seal_at_shutdown():
    """A stopping server seals the audit entries it committed last (console.audit.log's
    Sealer) once its requests are over: after the apps' own last writes (ops is installed
    after them, so its hook runs after theirs); what it cannot, the sweep seals."""
    from console.audit.log import audit_seals_flush
    from console.core.db import released
    from ops.context import on_shutdown

    on_shutdown(
        "audit seals made",
        released(audit_seals_flush, thread_sensitive=False),
        after_requests=True,
    )


def _request_over(**kwargs):
    """A thread that served a request (WSGI, the test client) logs outside one afterwards."""
    from ops.context import request_id

    request_id.set(None)
