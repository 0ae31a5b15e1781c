"""Capabilities through keys: a `manage` key acts as its principal, under that principal's roles
(`admin` implies every capability); other keys hold none of the management capabilities."""

import pytest

from console import access
from console.errors import Forbidden
from console.models import ApiKey
from tests.factories import PrincipalFactory, make_key


def key_of(raw):
    return ApiKey.objects.for_raw_key(raw)


@pytest.mark.django_db
def test_a_manage_key_has_the_capabilities_of_its_principals_roles(tenant_a, lead_a, viewer_a):
    lead_key = key_of(make_key(tenant_a, scopes=("manage",), principal=lead_a))
    viewer_key = key_of(make_key(tenant_a, scopes=("manage",), principal=viewer_a))
    for cap in ("view_budgets", "manage_budgets", "manage_rules"):
        assert access.can(lead_key, cap)
        access.require_capability(lead_key, cap)
        assert not access.can(viewer_key, cap)
        with pytest.raises(Forbidden, match=f"'{cap}' capability"):
            access.require_capability(viewer_key, cap)
    assert not access.can(lead_key, "admin")


@pytest.mark.django_db
def test_admin_implies_every_capability(tenant_a, admin_a):
    key = key_of(make_key(tenant_a, scopes=("manage",), principal=admin_a))
    for cap in ("view_budgets", "manage_budgets", "manage_rules", "admin"):
        assert access.can(key, cap)
        assert access.can(admin_a, cap)


@pytest.mark.django_db
def test_keys_without_the_manage_scope_hold_no_management_capability(tenant_a, lead_a):
    ingest = key_of(make_key(tenant_a, scopes=("ingest",)))
    decide = key_of(make_key(tenant_a, scopes=("decide",), principal=lead_a))
    for key in (ingest, decide):
        for cap in ("view_budgets", "manage_budgets", "manage_rules", "admin"):
            assert not access.can(key, cap)
    assert access.can(ingest, "view_runs")
    assert access.can(decide, "decide", "send_email")
    assert not access.can(decide, "view_runs")  # a decide key reads approvals, not runs


@pytest.mark.django_db
def test_a_manage_key_of_a_deactivated_principal_may_do_nothing(tenant_a):
    lena = PrincipalFactory(tenant=tenant_a, external_id="lena", role="lead")
    raw = make_key(tenant_a, scopes=("manage",), principal=lena)
    assert access.can(key_of(raw), "view_budgets")
    lena.is_active = False
    lena.save()
    key = key_of(raw)
    assert not access.can(key, "view_budgets")
    assert access.acting_principal(key) == lena


@pytest.mark.django_db
def test_a_manage_key_does_not_decide(tenant_a, lead_a):
    key = key_of(make_key(tenant_a, scopes=("manage",), principal=lead_a))
    assert not access.can(key, "decide", "send_email")
