from console.core.commands import ProvisioningCommand, split_csv
from console.directory.services import api_key_create, principal_get, tenant_get


class Command(ProvisioningCommand):
    help = "Create a new API key (always new). Prints the key alone on the last line, once."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--scope", default="ingest", help="comma-separated: ingest,decide,manage"
        )
        parser.add_argument("--principal", help="required with the decide and manage scopes")

    def handle(self, *args, tenant, name, scope, principal, **options):
        tenant_obj = tenant_get(slug=tenant)
        bound = principal_get(tenant=tenant_obj, external_id=principal) if principal else None
        key, raw = api_key_create(
            tenant=tenant_obj, name=name, scopes=split_csv(scope) or [], principal=bound
        )
        self.stdout.write(
            f"api key {key.key_prefix}… created for tenant {tenant_obj.slug} "
            f"(scopes: {','.join(key.scopes)}); it is shown once, store it now:"
        )
        self.stdout.write(raw)
