"""The `calls` control frame behind browser notifications, on the full ASGI app: every page's
socket (the nav count's, the inbox's, a run page's) gets one per new batch, listing the calls
this viewer may decide, with each card's path; nobody else's sockets hear of them, and a
principal who turned browser notifications off gets none."""

import pytest
from asgiref.sync import sync_to_async

from notifications.models import NotificationSettings
from tests.support.runs_live import RUN, admit, post_events
from tests.support.sockets import control, frames_until, hello, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


def requested(seq, *tools):
    calls = [
        {"toolCallId": f"call_{seq}_{i}", "toolName": tool, "arguments": {"to": "bob"},
         "reason": "mail the customer", "rejectionMessage": "Not sent."}
        for i, tool in enumerate(tools)
    ]  # fmt: skip
    return {"seq": seq, "type": "approval.requested", "step": seq, "calls": calls}


def is_calls(frame):
    return (control(frame) or {}).get("live") == "calls"


async def calls_frames(socket, quiet=0.7) -> list[dict]:
    """Every `calls` frame until the socket has been quiet for `quiet` seconds."""
    found = []
    while not await socket.receive_nothing(timeout=quiet):
        frame = await socket.receive_from(5)
        if is_calls(frame):
            found.append(control(frame))
    return found


async def test_each_page_socket_gets_the_new_calls_the_viewer_may_decide(
    tenant_a, reviewer_a, viewer_a
):
    api = await admit(tenant_a)
    sockets = {}
    for path in ("/ws/inbox/?only=count", "/ws/inbox/", f"/ws/runs/{RUN}/"):
        socket, connected = await open_socket(path, reviewer_a)
        assert connected, path
        await hello(socket)
        sockets[path] = socket
    watcher, _ = await open_socket("/ws/inbox/?only=count", viewer_a)  # may not decide
    await hello(watcher)
    await post_events(api, requested(1, "email.send", "crm.update"))
    for path, socket in sockets.items():
        frames = await calls_frames(socket)
        assert len(frames) == 1, path  # once, though a run page hears it through two groups
        [frame] = frames
        assert [c["title"] for c in frame["calls"]] == ["Decide: email.send", "Decide: crm.update"]
        call = frame["calls"][0]
        assert call["url"] == f"/approvals/{call['id']}/"
        assert call["body"] == "mail the customer (run run_live_1 for alice@example.com)"
    assert await calls_frames(watcher) == []
    for socket in (*sockets.values(), watcher):
        await socket.disconnect()


async def test_browser_notifications_off_and_another_tenant_hear_nothing(
    tenant_a, tenant_b, reviewer_a, reviewer_b
):
    await sync_to_async(NotificationSettings.objects.create)(
        tenant=tenant_a, principal=reviewer_a, browser=False
    )
    api = await admit(tenant_a)
    mine, _ = await open_socket("/ws/inbox/?only=count", reviewer_a)
    other, _ = await open_socket("/ws/inbox/?only=count", reviewer_b)
    for socket in (mine, other):
        await hello(socket)
    await post_events(api, requested(1, "email.send"))
    await frames_until(mine, lambda f: 'id="nav-pending-count"' in f)  # the count still moves
    assert await calls_frames(mine) == []
    assert await other.receive_nothing(timeout=0.5)
    for socket in (mine, other):
        await socket.disconnect()
