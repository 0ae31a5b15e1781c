"""Socket hygiene on the full ASGI app: the Origin check, anonymous refusal, sign-out and
deactivation closing the user's sockets, a revoked capability stopping updates."""

import pytest
from asgiref.sync import sync_to_async

from console.web import sockets as consumers
from tests.support.sockets import close_code, hello, open_socket, session_for

pytestmark = pytest.mark.django_db(transaction=True)


async def test_anonymous_and_foreign_origin_sockets_are_refused(reviewer_a):
    anonymous, _ = await open_socket("/ws/inbox/")
    assert await close_code(anonymous) == 4403
    _, connected = await open_socket("/ws/inbox/", reviewer_a, origin=b"http://evil.example")
    assert not connected


async def test_signing_out_closes_the_sockets_of_that_session_only(reviewer_a):
    from django.test import Client

    cookie = await session_for(reviewer_a)
    signed_out, _ = await open_socket("/ws/inbox/", cookie=cookie)
    other_session, _ = await open_socket("/ws/inbox/", reviewer_a)
    await hello(signed_out)
    await hello(other_session)
    client = Client()
    client.cookies["sessionid"] = cookie.decode().split("=", 1)[1]
    response = await sync_to_async(client.post)("/accounts/logout/")
    assert response.status_code in (200, 302)
    assert await close_code(signed_out, timeout=5) == 4403
    assert await other_session.receive_nothing(timeout=0.3)
    await other_session.disconnect()


async def test_deactivating_a_principal_closes_all_its_sockets(reviewer_a):
    first, _ = await open_socket("/ws/inbox/", reviewer_a)
    second, _ = await open_socket("/ws/inbox/?only=count", reviewer_a)
    await hello(first)
    await hello(second)
    reviewer_a.is_active = False
    await sync_to_async(reviewer_a.save)()
    assert await close_code(first) == 4403
    assert await close_code(second) == 4403


async def test_a_revoked_capability_closes_the_socket_at_the_next_recheck(
    reviewer_a, tenant_a, monkeypatch
):
    from console.models import Role

    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.2)
    monkeypatch.setattr(consumers.CHECKS, "ttl", 0.05)
    socket, _ = await open_socket("/ws/inbox/", reviewer_a)
    await hello(socket)
    # Roles edited in bulk (no signal): only the re-check can notice.
    await sync_to_async(Role.objects.filter(tenant=tenant_a).update)(capabilities=[])
    assert await close_code(socket, timeout=5) == 4403
