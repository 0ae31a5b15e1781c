from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self):
        from approvals.services import webhooks
        from console.core import outbox

        outbox.register(
            outbox.Sender(
                name=webhooks.SENDER,
                run_due=webhooks.webhook_deliveries_run_due,
                next_due=webhooks.webhook_next_due,
                claim=webhooks.webhook_deliveries_claim,
            )
        )
