from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self):
        from approvals import selectors
        from approvals.services import webhooks
        from console.core import outbox
        from console.directory import selectors as directory

        outbox.register(
            outbox.Sender(
                name=webhooks.SENDER,
                run_due=webhooks.webhook_deliveries_run_due,
                next_due=webhooks.webhook_next_due,
                claim=webhooks.webhook_deliveries_claim,
            )
        )
        # The role form's preview names the tools this tenant's calls named.
        directory.register_known_tools(selectors.known_tools)
