import pytest

from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, make_key


@pytest.fixture
def manage_a(client, tenant_a, lead_a):
    """A manage key acting as the lead of tenant A."""
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))


@pytest.fixture
def manage_b(client, tenant_b):
    lead_b = PrincipalFactory(tenant=tenant_b, external_id="lead@b.example", role="lead")
    return ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=lead_b))


@pytest.fixture
def alice(tenant_a):
    return PrincipalFactory(tenant=tenant_a, external_id="alice")
