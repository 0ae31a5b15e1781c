"""The run page's socket (/ws/runs/<runId>/) and the run list's (/ws/runs/), on the full ASGI
app: authorization before subscribing, live steps, audiences, gaps, render once per audience."""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from console.live import realtime
from console.models import Role
from console.web.sockets import RENDERS
from tests.support.factories import PrincipalFactory
from tests.support.runs_live import RUN, _admit, admit, has, post_events
from tests.support.sockets import close_code, control, frames_until, hello, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


async def test_anonymous_is_refused_4403(tenant_a):
    await admit(tenant_a)
    socket, _ = await open_socket(f"/ws/runs/{RUN}/")
    assert await close_code(socket) == 4403


async def test_a_foreign_origin_is_refused(tenant_a, reviewer_a):
    await admit(tenant_a)
    socket, connected = await open_socket(
        f"/ws/runs/{RUN}/", reviewer_a, origin=b"https://evil.example"
    )
    assert not connected


async def test_another_tenants_run_is_4404_like_a_missing_one(tenant_a, reviewer_b):
    await admit(tenant_a)
    other, _ = await open_socket(f"/ws/runs/{RUN}/", reviewer_b)
    assert await close_code(other) == 4404
    missing, _ = await open_socket("/ws/runs/run_nope/", reviewer_b)
    assert await close_code(missing) == 4404


async def test_a_role_without_view_runs_is_refused_4403(tenant_a):
    await admit(tenant_a)
    nobody = await sync_to_async(PrincipalFactory)(
        tenant=tenant_a, role=None, password="nobody-pass-123"
    )
    role = await sync_to_async(Role.objects.create)(
        tenant=tenant_a, name="budget-only", capabilities=["view_budgets"]
    )
    await sync_to_async(nobody.roles.add)(role)
    socket, _ = await open_socket(f"/ws/runs/{RUN}/", nobody)
    assert await close_code(socket) == 4403


async def test_subscribing_sends_the_current_state_then_steps_arrive_as_oob_swaps(
    tenant_a, reviewer_a
):
    api = await admit(tenant_a)
    socket, connected = await open_socket(f"/ws/runs/{RUN}/?seq=0", reviewer_a)
    assert connected
    state = "".join(await hello(socket))
    assert 'id="run-header"' in state and 'id="run-approvals"' in state
    assert 'id="nav-pending-count"' in state
    await post_events(
        api, {"seq": 1, "type": "step.started", "step": 1, "agentId": "support-bot", "model": "m"}
    )
    frames = await frames_until(socket, has('id="step-1"'))
    step = frames[-1]
    # replaced where the page has it, else appended through a wrapper; never <template>
    assert '<div hx-swap-oob="beforeend:#steps" data-live-unless="#step-1">' in step
    assert "<template" not in step
    assert 'id="run-header"' in step and '<span class="last-seq">1</span>' in step
    await socket.disconnect()


async def test_a_page_behind_the_run_gets_the_whole_timeline_on_subscribe(tenant_a, reviewer_a):
    api = await admit(tenant_a)
    await post_events(
        api, {"seq": 1, "type": "step.started", "step": 1, "agentId": "a", "model": "m"}
    )
    behind, _ = await open_socket(f"/ws/runs/{RUN}/?seq=0", reviewer_a)
    assert 'id="steps"' in "".join(await hello(behind))
    current, _ = await open_socket(f"/ws/runs/{RUN}/?seq=1", reviewer_a)
    assert 'id="steps"' not in "".join(await hello(current))
    await behind.disconnect()
    await current.disconnect()


async def test_a_viewer_never_receives_decision_controls(tenant_a, reviewer_a, viewer_a):
    api = await admit(tenant_a)
    reviewer, _ = await open_socket(f"/ws/runs/{RUN}/", reviewer_a)
    viewer, _ = await open_socket(f"/ws/runs/{RUN}/", viewer_a)
    await hello(reviewer)
    await hello(viewer)
    call = {"toolCallId": "c1", "toolName": "send_email", "arguments": {"to": "bob@example.com"}}
    await post_events(api, {"seq": 1, "type": "approval.requested", "step": 1, "calls": [call]})
    seen_by_reviewer = "".join(await frames_until(reviewer, has("approval-card")))
    seen_by_viewer = "".join(await frames_until(viewer, has("approval-card")))
    assert "Approve</button>" in seen_by_reviewer
    assert "Message the model reads" in seen_by_reviewer
    assert "Approve</button>" not in seen_by_viewer
    assert "decision-form" not in seen_by_viewer
    await reviewer.disconnect()
    await viewer.disconnect()


async def test_a_seq_gap_tells_the_client_to_resync_over_http(tenant_a, reviewer_a):
    await admit(tenant_a)
    socket, _ = await open_socket(f"/ws/runs/{RUN}/", reviewer_a)
    await hello(socket)
    group = realtime.run_group(tenant_a.pk, RUN)
    hint = {"type": "run.updated", "id": "x1", "tenant": tenant_a.pk, "run": RUN}
    await get_channel_layer().group_send(group, {**hint, "seq": 7, "prev": 5, "what": ["steps"]})
    frame = await socket.receive_from(5)
    assert control(frame) == {"live": "resync", "seq": 7}
    # The next hint continuing from 7 is rendered again (no resync).
    await get_channel_layer().group_send(
        group, {**hint, "id": "x2", "seq": 7, "prev": 7, "what": ["todos"]}
    )
    frames = await frames_until(socket, has('id="run-todos"'))
    assert all((control(f) or {}).get("live") != "resync" for f in frames)
    await socket.disconnect()


async def test_one_event_renders_once_per_audience_not_per_socket(tenant_a, reviewer_a, viewer_a):
    api = await admit(tenant_a)
    sockets = [await open_socket(f"/ws/runs/{RUN}/", p) for p in [viewer_a] * 3 + [reviewer_a] * 3]
    for socket, _ in sockets:
        await hello(socket)
    before = RENDERS.computed
    todos = [{"id": "t1", "content": "Check the invoice", "status": "pending"}]
    await post_events(api, {"seq": 1, "type": "todos.updated", "todos": todos})
    for socket, _ in sockets:
        frames = await frames_until(socket, has("Check the invoice"))
        assert 'id="run-todos"' in frames[-1]
    assert RENDERS.computed - before == 2  # viewers and reviewers: two audiences, six sockets
    for socket, _ in sockets:
        await socket.disconnect()


async def test_the_run_list_gets_new_runs_at_the_top_and_its_rows_replaced(tenant_a, viewer_a):
    socket, connected = await open_socket("/ws/runs/", viewer_a)
    assert connected
    await hello(socket)
    api = await admit(tenant_a)
    frames = await frames_until(socket, has('data-run-id="run_live_1"'))
    assert 'hx-swap-oob="afterbegin:#run-rows"' in frames[-1]
    await post_events(
        api, {"seq": 1, "type": "step.started", "step": 1, "agentId": "a", "model": "m"}
    )
    frames = await frames_until(socket, has('data-run-id="run_live_1"'))
    assert "afterbegin" not in frames[-1]  # a known run: its row is replaced by id
    await socket.disconnect()


async def test_the_run_list_of_another_tenant_hears_nothing(tenant_a, reviewer_b):
    socket, _ = await open_socket("/ws/runs/", reviewer_b)
    await hello(socket)
    await admit(tenant_a)
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


def test_layer_messages_carry_ids_and_facts_never_content(
    tenant_a, django_capture_on_commit_callbacks
):
    from unittest import mock

    with (
        mock.patch("console.live.realtime._send") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        _admit(tenant_a)
    for (_groups, message), _ in send.call_args_list:
        assert set(message) <= {"type", "id", "tenant", "run", "seq", "prev", "what"}
        json.dumps(message)


async def test_a_push_that_cannot_be_rendered_asks_the_client_to_resync(tenant_a, reviewer_a):
    from unittest import mock

    await admit(tenant_a)
    socket, _ = await open_socket(f"/ws/runs/{RUN}/", reviewer_a)
    await hello(socket)
    hint = {"type": "run.updated", "id": "y1", "tenant": tenant_a.pk, "run": RUN, "seq": 0}
    with mock.patch("runs.live.run_update_html", side_effect=RuntimeError("database away")):
        await get_channel_layer().group_send(
            realtime.run_group(tenant_a.pk, RUN), {**hint, "prev": 0, "what": ["todos"]}
        )
        assert control(await socket.receive_from(5)) == {"live": "resync"}
    await socket.disconnect()
