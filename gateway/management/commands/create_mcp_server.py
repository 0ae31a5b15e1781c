import argparse

from django.core.management.base import CommandError

from console.core.commands import ProvisioningCommand
from console.directory.services import tenant_get
from gateway.services import server_upsert_operator


class Command(ProvisioningCommand):
    help = (
        "Create or change an upstream MCP server of a tenant (idempotent by name): "
        "--stdio -- COMMAND [ARG]... (a local process, the operator's only) or --url URL "
        "[--header K:V]..."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("name")
        parser.add_argument("--url")
        parser.add_argument("--header", action="append", default=[], help="K:V (repeatable)")
        parser.add_argument("--stdio", action="store_true", help="then -- COMMAND [ARG]...")
        parser.add_argument("--command", nargs="*", default=[], help=argparse.SUPPRESS)

    def run_from_argv(self, argv):
        """`-- COMMAND [ARG]...`: everything after `--` is the stdio command, verbatim."""
        if "--" in argv:
            at = argv.index("--")
            self._after_dashes = argv[at + 1 :]
            argv = argv[:at]
        return super().run_from_argv(argv)

    def handle(self, *args, tenant, name, url, header, stdio, command, **options):
        command = list(command or getattr(self, "_after_dashes", []))
        if stdio == bool(url):
            raise CommandError("give either --stdio -- COMMAND [ARG]... or --url URL")
        if stdio and not command:
            raise CommandError("--stdio needs a command after --")
        if url and command:
            raise CommandError("a command is only for --stdio")
        headers = {}
        for item in header:
            key, sep, value = item.partition(":")
            if not sep or not key.strip():
                raise CommandError(f"--header {item!r} is not K:V")
            headers[key.strip()] = value.strip()
        tenant_obj = tenant_get(slug=tenant)
        server, created = server_upsert_operator(
            tenant=tenant_obj, name=name, command=command or None, url=url, headers=headers
        )
        what = "created" if created else "updated"
        how = " ".join(server.command) if stdio else server.url
        self.stdout.write(f"MCP server {server.name} {what} for tenant {tenant_obj.slug}: {how}")
