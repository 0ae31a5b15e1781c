"""Roles managed by an admin: create, change, delete, each audited with before → after.

A role's capabilities are checked here (422 at `capabilities.N` for an unknown one) so the API
and the page refuse the same things. A change that would leave the tenant without an active
admin is 409 `last_admin` (console.services.admins_remain, under the tenant's row lock).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from console.core.errors import Conflict, Invalid
from console.directory.schemas.directory import role_snapshot
from console.directory.services import (
    actor_of,
    admins_exist,
    admins_remain,
    audit,
    invalid,
    tenant_lock,
)
from console.models import CAPABILITIES, Role, Tenant


def _capabilities(names: list[str]) -> list[str]:
    """Known capabilities only (422 at `capabilities.N`), in the canonical order."""
    for n, name in enumerate(names):
        if name not in CAPABILITIES:
            raise invalid(
                f"capabilities.{n}",
                f"unknown capability '{name}' (known: {', '.join(CAPABILITIES)})",
            )
    return [c for c in CAPABILITIES if c in names]


def _globs(globs: list[str]) -> list[str]:
    return list(dict.fromkeys(g.strip() for g in globs if g.strip()))


@transaction.atomic
def role_add(*, tenant: Tenant, fields: dict, viewer) -> Role:
    """A new role (name, capabilities, decide_tools, slack_decide); 409 `role_exists`."""
    capabilities = _capabilities(fields.get("capabilities", []))
    try:
        with transaction.atomic():
            role = Role.objects.create(
                tenant=tenant,
                name=fields["name"],
                capabilities=capabilities,
                decide_tools=_globs(fields.get("decide_tools", [])),
                slack_decide=fields.get("slack_decide", True),
            )
    except IntegrityError:
        raise Conflict(
            f"a role '{fields['name']}' already exists in this tenant",
            code="role_exists",
            details={"name": fields["name"]},
        ) from None
    audit(
        tenant=tenant,
        action="role.created",
        object_type="role",
        object_id=role.name,
        after=role_snapshot(role),
        **actor_of(viewer),
    )
    return role


@transaction.atomic
def role_update(*, role: Role, fields: dict, viewer) -> Role:
    """Change any of capabilities, decide_tools, slack_decide (only those in `fields`)."""
    capabilities = _capabilities(fields["capabilities"]) if "capabilities" in fields else None
    tenant_lock(tenant_id=role.tenant_id)
    had = admins_exist(tenant_id=role.tenant_id)
    role = Role.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=role.pk)
    before = role_snapshot(role)
    if capabilities is not None:
        role.capabilities = capabilities
    if "decide_tools" in fields:
        role.decide_tools = _globs(fields["decide_tools"])
    if "slack_decide" in fields:
        role.slack_decide = fields["slack_decide"]
    after = role_snapshot(role)
    if after == before:
        return role
    role.save(update_fields=["capabilities", "decide_tools", "slack_decide"])
    admins_remain(tenant_id=role.tenant_id, had=had)
    audit(
        tenant=role.tenant,
        action="role.updated",
        object_type="role",
        object_id=role.name,
        before=before,
        after=after,
        **actor_of(viewer),
    )
    return role


def role_create(
    *, tenant: Tenant, name: str, capabilities: list[str] | None, decide_tools: list[str] | None
) -> tuple[Role, bool]:
    """The provisioning command's create-or-update (idempotent: it may run again, and
    concurrently), written by `role_add` for a new role and `role_update` for a known one
    (only what is given changes), so each action has one audit shape."""
    if not name:
        raise Invalid("a role needs a name")
    unknown = sorted(set(capabilities or []) - set(CAPABILITIES))
    if unknown:
        raise Invalid(
            f"unknown capabilities: {', '.join(unknown)} (known: {', '.join(CAPABILITIES)})"
        )
    held = Role.objects.filter(tenant=tenant, name=name).first()
    if held is None:
        fields = {"name": name, "capabilities": capabilities or []}
        fields["decide_tools"] = decide_tools or []
        try:
            return role_add(tenant=tenant, fields=fields, viewer=None), True
        except Conflict:  # a concurrent command made it first
            held = Role.objects.get(tenant=tenant, name=name)
    fields = {}
    if capabilities is not None:
        fields["capabilities"] = capabilities
    if decide_tools is not None:
        fields["decide_tools"] = decide_tools
    return role_update(role=held, fields=fields, viewer=None), False


@transaction.atomic
def role_delete(*, role: Role, viewer) -> None:
    """Delete a role no one holds (409 `role_in_use` with `details.principals` otherwise)."""
    tenant_lock(tenant_id=role.tenant_id)
    had = admins_exist(tenant_id=role.tenant_id)
    role = Role.objects.select_related("tenant").get(pk=role.pk)
    holders = sorted(role.principals.values_list("external_id", flat=True))
    if holders:
        raise Conflict(
            f"the role '{role.name}' is held by {len(holders)} principal(s); take it from "
            "them first",
            code="role_in_use",
            details={"principals": holders},
        )
    before = role_snapshot(role)
    role.delete()
    admins_remain(tenant_id=role.tenant_id, had=had)
    audit(
        tenant=role.tenant,
        action="role.deleted",
        object_type="role",
        object_id=before["name"],
        before=before,
        **actor_of(viewer),
    )
