"""console/0004_principal_user_per_tenant: a login linked to one principal (the old one-to-one)
stays linked, and may then be linked in a second tenant."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("console", "0003_signin_throttle")]
AFTER = [("console", "0004_principal_user_per_tenant")]


@pytest.mark.django_db(transaction=True)
def test_existing_links_survive_the_migration():
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(BEFORE)
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        user = old.get_model("auth", "User").objects.create(username="alice")
        tenant_model = old.get_model("console", "Tenant")
        a = tenant_model.objects.create(slug="a", name="A")
        b = tenant_model.objects.create(slug="b", name="B")
        old.get_model("console", "Principal").objects.create(
            tenant=a, external_id="alice", user=user
        )

        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = MigrationExecutor(connection).loader.project_state(AFTER).apps
        principal_model = new.get_model("console", "Principal")
        assert principal_model.objects.get(external_id="alice").user_id == user.pk
        principal_model.objects.create(tenant_id=b.pk, external_id="alice", user_id=user.pk)
        assert principal_model.objects.filter(user_id=user.pk).count() == 2
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
