from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """The MCP gateway: any MCP client's tool calls held for a human (gateway/asgi.py)."""

    name = "gateway"
    default_auto_field = "django.db.models.BigAutoField"
