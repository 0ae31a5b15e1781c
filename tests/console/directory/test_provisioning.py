"""The provisioning commands: idempotent, clear errors, keys shown once and stored hashed."""

import pytest
from django.core.management import CommandError, call_command

from console.models import ApiKey, Principal, Role, Tenant


def run(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_create_tenant_is_idempotent_and_adds_the_default_roles():
    run("create_tenant", "acme", "--name", "Acme")
    run("create_tenant", "acme", "--name", "Acme")
    assert Tenant.objects.filter(slug="acme").count() == 1
    names = set(Role.objects.filter(tenant__slug="acme").values_list("name", flat=True))
    assert names == {"admin", "lead", "reviewer", "viewer"}
    reviewer = Role.objects.get(tenant__slug="acme", name="reviewer")
    assert reviewer.capabilities == ["view_runs", "decide"]
    assert reviewer.decide_tools == ["*"]


@pytest.mark.django_db
def test_create_tenant_rejects_a_bad_slug():
    with pytest.raises(CommandError, match="slug"):
        run("create_tenant", "Not A Slug")
    assert not Tenant.objects.exists()


@pytest.mark.django_db
def test_create_role_validates_capabilities():
    run("create_tenant", "acme")
    with pytest.raises(CommandError, match="unknown capabilities: fly"):
        run("create_role", "--tenant", "acme", "pilot", "--capabilities", "view_runs,fly")
    assert not Role.objects.filter(name="pilot").exists()
    run(
        "create_role",
        "--tenant",
        "acme",
        "refunds",
        "--capabilities",
        "decide",
        "--decide-tools",
        "refund_*",
    )
    assert Role.objects.get(name="refunds").decide_tools == ["refund_*"]


@pytest.mark.django_db
def test_create_principal_with_password_can_sign_in(client):
    run("create_tenant", "acme")
    run(
        "create_principal",
        "--tenant",
        "acme",
        "alice@example.com",
        "--password",
        "s3cret-pass",
        "--role",
        "reviewer",
        "--team",
        "support",
    )
    run("create_principal", "--tenant", "acme", "alice@example.com", "--role", "reviewer")
    alice = Principal.objects.get(external_id="alice@example.com")
    assert [r.name for r in alice.roles.all()] == ["reviewer"]
    assert [t.name for t in alice.teams.all()] == ["support"]
    assert client.login(username="alice@example.com", password="s3cret-pass")


@pytest.mark.django_db
def test_create_principal_with_unknown_role_fails_and_writes_nothing():
    run("create_tenant", "acme")
    with pytest.raises(CommandError, match="no role 'pilot'"):
        run("create_principal", "--tenant", "acme", "bob", "--role", "pilot")
    assert not Principal.objects.filter(external_id="bob").exists()


@pytest.mark.django_db
def test_create_api_key_prints_the_key_last_and_stores_only_its_hash():
    run("create_tenant", "acme")
    out = run("create_api_key", "--tenant", "acme", "--name", "bot")
    raw = out.strip().splitlines()[-1]
    assert raw.startswith("gvl_")
    key = ApiKey.objects.get()
    assert key.scopes == ["ingest"]
    assert raw not in (key.key_hash, key.key_prefix)
    assert ApiKey.objects.for_raw_key(raw) == key
    run("create_api_key", "--tenant", "acme", "--name", "bot")
    assert ApiKey.objects.count() == 2  # always a new key; names need not be unique


@pytest.mark.django_db
def test_decide_key_needs_a_principal():
    run("create_tenant", "acme")
    with pytest.raises(CommandError, match="--principal"):
        run("create_api_key", "--tenant", "acme", "--name", "bot", "--scope", "decide")
    with pytest.raises(CommandError, match="unknown scopes: admin"):
        run("create_api_key", "--tenant", "acme", "--name", "bot", "--scope", "admin")
    assert not ApiKey.objects.exists()


@pytest.mark.django_db
def test_unknown_tenant_is_a_clear_error():
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        run("create_api_key", "--tenant", "nope", "--name", "bot")


@pytest.mark.django_db
def test_manage_key_needs_a_principal_and_acts_as_it():
    run("create_tenant", "acme")
    with pytest.raises(CommandError, match="'manage' scope must be bound to a principal"):
        run("create_api_key", "--tenant", "acme", "--name", "ops", "--scope", "manage")
    assert not ApiKey.objects.exists()
    run("create_principal", "--tenant", "acme", "adam", "--role", "admin")
    out = run(
        "create_api_key",
        "--tenant",
        "acme",
        "--name",
        "ops",
        "--scope",
        "manage",
        "--principal",
        "adam",
    )
    key = ApiKey.objects.for_raw_key(out.strip().splitlines()[-1])
    assert key.scopes == ["manage"]
    assert key.principal.external_id == "adam"


@pytest.mark.django_db
def test_new_tenants_lead_and_admin_roles_may_manage_rules():
    run("create_tenant", "acme")
    caps = dict(Role.objects.filter(tenant__slug="acme").values_list("name", "capabilities"))
    assert "manage_rules" in caps["lead"]
    assert "manage_rules" in caps["admin"]
    assert "manage_rules" not in caps["reviewer"]
    run("create_role", "--tenant", "acme", "rulers", "--capabilities", "manage_rules")
    assert Role.objects.get(name="rulers").capabilities == ["manage_rules"]


@pytest.mark.django_db
def test_the_upgrade_gives_existing_admin_and_lead_roles_manage_rules():
    import importlib

    from django.apps import apps

    migration = importlib.import_module("console.migrations.0002_manage_rules")
    run("create_tenant", "acme")
    old = ["view_runs", "decide", "view_budgets", "manage_budgets"]
    Role.objects.filter(name__in=("admin", "lead")).update(capabilities=old)
    migration.grant(apps, None)
    migration.grant(apps, None)  # running twice adds it once
    caps = dict(Role.objects.filter(tenant__slug="acme").values_list("name", "capabilities"))
    assert caps["lead"] == [*old, "manage_rules"]
    assert caps["admin"] == [*old, "manage_rules"]
    assert caps["reviewer"] == ["view_runs", "decide"]
    migration.revoke(apps, None)
    assert Role.objects.get(tenant__slug="acme", name="lead").capabilities == old


@pytest.mark.django_db
def test_the_commands_write_through_the_apis_writers_one_audit_shape_per_action():
    """create_principal and create_role are audited exactly as the API's writers audit: the
    new object's wire form (`after`), a change as before -> after, and a run that changes
    nothing writes nothing. A team the command names is created (and audited) by the team
    writer."""
    from console.models import AuditEvent

    run("create_tenant", "acme")
    run("create_role", "--tenant", "acme", "refunds", "--capabilities", "decide")
    created = AuditEvent.objects.get(action="role.created", object_id="refunds")
    assert created.before is None and not created.data
    assert created.after == {
        "name": "refunds",
        "capabilities": ["decide"],
        "decideTools": [],
        "slackDecide": True,
    }
    run("create_role", "--tenant", "acme", "refunds", "--decide-tools", "refund_*")
    changed = AuditEvent.objects.get(action="role.updated", object_id="refunds")
    assert changed.before["decideTools"] == [] and changed.after["decideTools"] == ["refund_*"]

    run("create_principal", "--tenant", "acme", "carol", "--role", "refunds", "--team", "support")
    assert AuditEvent.objects.filter(action="team.created", object_id="support").count() == 1
    entry = AuditEvent.objects.get(action="principal.created", object_id="carol")
    assert not entry.data  # no second shape ({"roles", "teams", "login"})
    assert entry.after == {
        "id": "carol",
        "name": "",
        "email": "",
        "roles": ["refunds"],
        "teams": ["support"],
        "active": True,
        "reviewed": True,
        "canSignIn": False,
    }
    run("create_principal", "--tenant", "acme", "carol", "--role", "refunds", "--team", "support")
    assert not AuditEvent.objects.filter(action="principal.updated", object_id="carol").exists()
    run("create_principal", "--tenant", "acme", "carol", "--role", "viewer", "--name", "Carol")
    update = AuditEvent.objects.get(action="principal.updated", object_id="carol")
    assert update.before["roles"] == ["refunds"] and update.before["name"] == ""
    assert update.after["roles"] == ["refunds", "viewer"] and update.after["name"] == "Carol"
