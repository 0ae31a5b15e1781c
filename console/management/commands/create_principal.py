from console.core.commands import ProvisioningCommand
from console.directory.services import tenant_get
from console.directory.services.principals import principal_create


class Command(ProvisioningCommand):
    help = "Create or update a principal; with --password it can sign in with its id."

    def add_arguments(self, parser):
        parser.add_argument("principal_id")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name")
        parser.add_argument("--email")
        parser.add_argument("--password")
        parser.add_argument("--role", action="append", default=[])
        parser.add_argument("--team", action="append", default=[])

    def handle(self, *args, principal_id, tenant, name, email, password, role, team, **options):
        principal, created = principal_create(
            tenant=tenant_get(slug=tenant),
            external_id=principal_id,
            name=name,
            email=email,
            password=password,
            roles=role,
            teams=team,
        )
        verb = "created" if created else "updated"
        roles = ",".join(sorted(r.name for r in principal.roles.all())) or "-"
        self.stdout.write(f"principal {principal.external_id} {verb} (roles: {roles})")
