"""The bell's count over the nav socket (every page's), on the full ASGI app: it is sent on
subscribe, follows a new notification and a read live, and only the recipient's sockets hear
of it (ids only on the layer)."""

import pytest
from asgiref.sync import sync_to_async

from notifications.services import notifications_mark_all_read
from tests.support.mail import budget_alert
from tests.support.sockets import frames_until, hello, open_socket

pytestmark = pytest.mark.django_db(transaction=True)
BELL = 'id="nav-notification-count"'


def bell(count: int):
    return lambda frame: BELL in frame and f">{count}<span" in frame


async def test_the_count_is_sent_on_subscribe_and_follows_live(tenant_a, viewer_a):
    await sync_to_async(budget_alert)(tenant=tenant_a, recipients=[viewer_a])
    socket, connected = await open_socket("/ws/inbox/?only=count", viewer_a)
    assert connected
    state = "".join(await hello(socket))
    assert BELL in state and ">1<span" in state[state.index(BELL) :][:200]
    await sync_to_async(budget_alert)(tenant=tenant_a, recipients=[viewer_a])
    frames = await frames_until(socket, bell(2))
    assert 'class="tag is-rounded is-danger bell-count"' in frames[-1]
    await sync_to_async(notifications_mark_all_read)(viewer=viewer_a)
    frames = await frames_until(socket, bell(0))
    assert "is-hidden" in frames[-1]
    await socket.disconnect()


async def test_every_pages_socket_carries_the_bell(tenant_a, admin_a):
    from tests.support.runs_live import RUN, admit

    await admit(tenant_a)
    sockets = []
    for path in ("/ws/runs/", f"/ws/runs/{RUN}/", "/ws/inbox/"):
        socket, connected = await open_socket(path, admin_a)
        assert connected, path
        await hello(socket)
        sockets.append(socket)
    await sync_to_async(budget_alert)(tenant=tenant_a, recipients=[admin_a])
    for socket in sockets:
        await frames_until(socket, bell(1))
        await socket.disconnect()


async def test_only_the_recipients_sockets_hear_of_it(
    tenant_a, tenant_b, viewer_a, lead_a, reviewer_b
):
    mine, _ = await open_socket("/ws/inbox/?only=count", viewer_a)
    colleague, _ = await open_socket("/ws/inbox/?only=count", lead_a)
    other_tenant, _ = await open_socket("/ws/inbox/?only=count", reviewer_b)
    for socket in (mine, colleague, other_tenant):
        await hello(socket)
    await sync_to_async(budget_alert)(tenant=tenant_a, recipients=[viewer_a])
    await frames_until(mine, bell(1))
    assert await colleague.receive_nothing(timeout=0.5)
    assert await other_tenant.receive_nothing(timeout=0.1)
    for socket in (mine, colleague, other_tenant):
        await socket.disconnect()


async def test_a_rolled_back_notification_pushes_nothing(tenant_a, viewer_a):
    from django.db import transaction

    socket, _ = await open_socket("/ws/inbox/?only=count", viewer_a)
    await hello(socket)

    def fails():
        with transaction.atomic():
            budget_alert(tenant=tenant_a, recipients=[viewer_a])
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        await sync_to_async(fails)()
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()
