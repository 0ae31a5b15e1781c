from console.core.commands import ProvisioningCommand, split_csv
from console.directory.services import tenant_get
from console.directory.services.roles import role_create
from console.models import CAPABILITIES


class Command(ProvisioningCommand):
    help = "Create or update a role: capabilities and the tool globs it may decide."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--tenant", required=True)
        parser.add_argument(
            "--capabilities",
            help="comma-separated: " + ",".join(CAPABILITIES),
        )
        parser.add_argument("--decide-tools", help="comma-separated globs, e.g. 'refund_*,email_*'")

    def handle(self, *args, name, tenant, capabilities, decide_tools, **options):
        role, created = role_create(
            tenant=tenant_get(slug=tenant),
            name=name,
            capabilities=split_csv(capabilities),
            decide_tools=split_csv(decide_tools),
        )
        verb = "created" if created else "updated"
        self.stdout.write(
            f"role {role.name} {verb}: capabilities={','.join(role.capabilities) or '-'} "
            f"decide_tools={','.join(role.decide_tools) or '-'}"
        )
