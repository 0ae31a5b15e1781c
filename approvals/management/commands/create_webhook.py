from approvals.services.webhooks import webhook_create
from console.management.commands._base import ProvisioningCommand, split_csv
from console.services import tenant_get


class Command(ProvisioningCommand):
    help = (
        "Register an HTTPS endpoint for approval.requested / approval.decided. Prints the "
        "signing secret alone on the last line, once."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--url", required=True, help="https://...")
        parser.add_argument(
            "--events", help="comma-separated (default: approval.requested,approval.decided)"
        )

    def handle(self, *args, tenant, url, events, **options):
        webhook, secret = webhook_create(
            tenant=tenant_get(slug=tenant), url=url, events=split_csv(events)
        )
        self.stdout.write(
            f"webhook {webhook.pk} for tenant {tenant} → {url} ({', '.join(webhook.events)}); "
            "its signing secret is shown once, store it now:"
        )
        self.stdout.write(secret)
