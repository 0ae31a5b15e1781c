from console.core.commands import ProvisioningCommand
from console.directory.services import tenant_create


class Command(ProvisioningCommand):
    help = "Create a tenant (idempotent) with the default roles admin, lead, reviewer and viewer."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--name")
        parser.add_argument("--allow-self-approval", action="store_true", default=None)

    def handle(self, *args, slug, name, allow_self_approval, **options):
        tenant, created = tenant_create(
            slug=slug, name=name, allow_self_approval=allow_self_approval
        )
        verb = "created" if created else "already exists, kept"
        self.stdout.write(f"tenant {tenant.slug} ({tenant.name}) {verb}")
