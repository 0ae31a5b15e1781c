from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """The MCP gateway: any MCP client's tool calls held for a human (gateway/asgi.py)."""

    name = "gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from gateway import shutdown

        shutdown.register()  # waiting calls answer on SIGTERM (ops/context.py's hooks)
        # The edge's per-process copies (gateway/edge.py) go when this process changes a row
        # they hold; the sweep records passed calls a stopped process left unrecorded and
        # closes idle sessions (gateway/records.py).
        from django.db.models.signals import m2m_changed, post_delete, post_save

        from console.core import outbox
        from console.models import ApiKey, Principal, Role
        from gateway import edge, records
        from gateway.models import McpServer, McpSession

        for model in (ApiKey, Principal, Role, McpServer, McpSession):
            post_save.connect(edge.forget, sender=model, dispatch_uid=f"mcp-edge-{model.__name__}")
            post_delete.connect(
                edge.forget, sender=model, dispatch_uid=f"mcp-edge-del-{model.__name__}"
            )
        m2m_changed.connect(  # a principal's roles (the rule authority's copy)
            edge.forget, sender=Principal.roles.through, dispatch_uid="mcp-edge-principal-roles"
        )
        outbox.register(
            outbox.Sender(
                name="MCP calls recorded and idle sessions closed",
                run_due=records.gateway_sweep,
                next_due=lambda: None,
                sweep_only=True,
            )
        )
