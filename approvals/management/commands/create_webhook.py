from approvals.models import WebhookEvent, WebhookFormat
from approvals.services.webhooks import webhook_create
from console.core.commands import ProvisioningCommand, split_csv
from console.directory.services import tenant_get


class Command(ProvisioningCommand):
    help = (
        "Register an HTTPS endpoint for the console's events (approvals, reminders, budgets). "
        "Prints the signing secret alone on the last line, once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument(
            "--url", required=True, help="https://... (http:// too with GAVEL_WEBHOOK_ALLOW_HTTP=1)"
        )
        parser.add_argument(
            "--events", help=f"comma-separated (default: all of {','.join(WebhookEvent.values)})"
        )
        parser.add_argument(
            "--format", default=WebhookFormat.GAVEL, help=f"one of {','.join(WebhookFormat.values)}"
        )

    def handle(self, *args, tenant, url, events, format, **options):
        webhook, secret = webhook_create(
            tenant=tenant_get(slug=tenant), url=url, events=split_csv(events), format=format
        )
        self.stdout.write(
            f"webhook {webhook.public_id} for tenant {tenant} → {url} "
            f"({', '.join(webhook.events)}); its signing secret is shown once, store it now:"
        )
        self.stdout.write(secret)
