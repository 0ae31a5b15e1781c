from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """The MCP gateway: any MCP client's tool calls held for a human (gateway/asgi.py)."""

    name = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from gateway import shutdown

        shutdown.register()  # waiting calls answer on SIGTERM (ops/context.py's hooks)
