"""Shared plumbing for the provisioning commands: domain errors become a clear non-zero exit."""

from django.core.management.base import BaseCommand, CommandError

from console.core.errors import GavelError


def split_csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


class ProvisioningCommand(BaseCommand):
    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except GavelError as exc:
            raise CommandError(exc.message) from None
