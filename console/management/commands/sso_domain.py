from console.core.commands import ProvisioningCommand
from console.directory.services import sso_domains, tenant_get
from console.models import SsoDomain


class Command(ProvisioningCommand):
    help = (
        "The operator's word on SSO email domains: --pin DOMAIN makes it the tenant's "
        "(claimed and verified; any other tenant's verification of it ends), --unpin DOMAIN "
        "takes the verification back; with neither, lists the tenant's domains."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--pin", metavar="DOMAIN")
        group.add_argument("--unpin", metavar="DOMAIN")

    def handle(self, *args, tenant, pin, unpin, **options):
        tenant = tenant_get(slug=tenant)
        if pin:
            row = sso_domains.sso_domain_pin(tenant=tenant, domain=pin)
            self.stdout.write(f"{row.domain} pinned to {tenant.slug} (verified)")
        elif unpin:
            done = sso_domains.sso_domain_unpin(tenant=tenant, domain=unpin)
            self.stdout.write(
                f"{unpin} {'unpinned' if done else 'was not verified'} for {tenant.slug}"
            )
        for row in SsoDomain.objects.filter(tenant=tenant).order_by("domain"):
            state = f"verified ({row.method})" if row.verified_at else "claimed, not verified"
            self.stdout.write(f"{row.domain}: {state}")
