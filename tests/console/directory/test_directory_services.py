"""The directory's services beyond the API's answers: deactivation ends the principal's
browser sessions in its tenant at once (not those of the same login in another tenant), closes
its sockets through the channel layer, and stops it deciding; reactivation restores sign-in but
not the ended sessions; `last_admin` holds under two concurrent demotions (PostgreSQL)."""

import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import Client

from approvals import access as approvals_access
from approvals.services.decisions import approval_decide
from console.core.errors import Conflict, Forbidden
from console.directory.services.principals import principal_update
from console.models import Principal, Role, UserSession
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory
from tests.support.sockets import close_code, hello, open_socket


def _signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal.user)
    assert client.get("/runs/").status_code == 200
    return client


@pytest.mark.django_db
def test_sign_in_records_the_sessions_login(reviewer_a):
    client = _signed_in(reviewer_a)
    key = client.cookies["sessionid"].value
    assert UserSession.objects.get(session_key=key).user == reviewer_a.user


@pytest.mark.django_db
def test_deactivation_ends_its_sessions_the_next_page_goes_to_sign_in(admin_a, reviewer_a):
    first, second = _signed_in(reviewer_a), _signed_in(reviewer_a)
    principal_update(principal=reviewer_a, fields={"active": False}, viewer=admin_a)
    for client in (first, second):
        response = client.get("/runs/")
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_reactivation_restores_sign_in_but_not_the_ended_sessions(client, admin_a, reviewer_a):
    ended = _signed_in(reviewer_a)
    principal_update(principal=reviewer_a, fields={"active": False}, viewer=admin_a)
    refused = client.post(
        "/accounts/login/", {"username": reviewer_a.external_id, "password": "reviewer-pass-123"}
    )
    assert refused.status_code == 200  # the form again, not a redirect
    assert refused.context["form"].errors["__all__"] == [
        "This account has been deactivated by an admin."
    ]
    assert client.get("/runs/").status_code == 302
    principal_update(principal=reviewer_a, fields={"active": True}, viewer=admin_a)
    assert ended.get("/runs/").status_code == 302
    fresh = Client()
    response = fresh.post(
        "/accounts/login/", {"username": reviewer_a.external_id, "password": "reviewer-pass-123"}
    )
    assert response.status_code == 302
    assert fresh.get("/runs/").status_code == 200


@pytest.mark.django_db
def test_a_shared_logins_session_in_another_tenant_goes_on(admin_a, reviewer_a, tenant_b):
    in_tenant_b = Principal.objects.create(
        tenant=tenant_b, external_id=reviewer_a.external_id, user=reviewer_a.user
    )
    in_tenant_b.roles.add(Role.objects.get(tenant=tenant_b, name="viewer"))
    in_a, in_b = _signed_in(reviewer_a), _signed_in(reviewer_a)
    assert in_b.post("/accounts/tenant/", {"tenant": "tenant-b"}).status_code in (302, 303)
    principal_update(principal=reviewer_a, fields={"active": False}, viewer=admin_a)
    assert in_a.get("/runs/").status_code == 302  # it acted in tenant A: ended
    response = in_b.get("/runs/", follow=False)
    assert response.status_code == 200  # it acts in tenant B: goes on


@pytest.mark.django_db
def test_a_deactivated_principal_can_no_longer_decide(admin_a, reviewer_a, tenant_a):
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    principal_update(principal=reviewer_a, fields={"active": False}, viewer=admin_a)
    reviewer_a.refresh_from_db()
    assert approvals_access.decide_refusal(reviewer_a, approval) == "you may not decide approvals"
    with pytest.raises(Forbidden):
        approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    approval.refresh_from_db()
    assert approval.status == "pending"


@pytest.mark.django_db(transaction=True)
async def test_deactivation_closes_its_open_sockets_within_five_seconds(admin_a, reviewer_a):
    inbox, _ = await open_socket("/ws/inbox/", reviewer_a)
    runs, _ = await open_socket("/ws/inbox/?only=count", reviewer_a)
    await hello(inbox)
    await hello(runs)
    await sync_to_async(principal_update)(
        principal=reviewer_a, fields={"active": False}, viewer=admin_a
    )
    assert await close_code(inbox, timeout=5) == 4403
    assert await close_code(runs, timeout=5) == 4403


@pytest.mark.django_db
def test_last_admin_refuses_and_writes_nothing(admin_a):
    with pytest.raises(Conflict) as refused:
        principal_update(principal=admin_a, fields={"active": False, "name": "x"}, viewer=admin_a)
    assert refused.value.code == "last_admin"
    admin_a.refresh_from_db()
    assert admin_a.is_active and admin_a.name != "x"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_demotions_of_the_last_two_admins_exactly_one_wins(tenant_a, admin_a):
    second = PrincipalFactory(tenant=tenant_a, external_id="second-admin", role="admin")
    barrier = threading.Barrier(2, timeout=60)
    results = {}

    def demote(principal):
        try:
            connection.ensure_connection()
            barrier.wait()
            principal_update(principal=principal, fields={"roles": ["viewer"]}, viewer=None)
            results[principal.external_id] = "ok"
        except Conflict as error:
            results[principal.external_id] = error.code
        finally:
            connection.close()

    threads = [threading.Thread(target=demote, args=(p,)) for p in (admin_a, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results.values()) == ["last_admin", "ok"], results
    admins = Principal.objects.filter(tenant=tenant_a, roles__name="admin", is_active=True)
    assert admins.count() == 1
