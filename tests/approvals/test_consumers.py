"""The inbox socket (/ws/inbox/) on the full ASGI app: held calls arrive as the desk's rows
(with or without `desk=1`: the grouped inbox is gone), decisions take them out and re-render the
card in the pane, the navigation count follows everywhere; tenants and roles kept apart."""

import pytest
from asgiref.sync import sync_to_async

from console.models import Role
from tests.support.factories import PrincipalFactory
from tests.support.runs_live import RUN, admit, post_events
from tests.support.sockets import close_code, frames_until, hello, open_socket

pytestmark = pytest.mark.django_db(transaction=True)
CALL = {"toolCallId": "c1", "toolName": "send_email", "arguments": {"to": "bob@example.com"}}


def has(text):
    return lambda frame: text in frame


async def request_call(api, seq=1, call=CALL):
    await post_events(api, {"seq": seq, "type": "approval.requested", "step": 1, "calls": [call]})


@pytest.mark.parametrize("path", ["/ws/inbox/", "/ws/inbox/?desk=1"])
async def test_a_held_call_arrives_as_a_row_and_the_nav_count_follows(tenant_a, reviewer_a, path):
    api = await admit(tenant_a)
    inbox, connected = await open_socket(path, reviewer_a)
    assert connected
    assert 'id="nav-pending-count"' in "".join(await hello(inbox))
    await request_call(api)
    frames = "".join(await frames_until(inbox, has("desk-row-")))
    assert 'hx-swap-oob="beforeend:#desk-rows"' in frames  # a new row, at the end
    # ... unless more pages wait (the new call belongs to the last) or it is there already
    assert 'data-live-unless="#desk-more, #desk-row-' in frames
    assert 'class="desk-check"' in frames  # the reviewer's to select and decide
    assert "1 to decide" in frames and ">1<span" in frames  # the list's and the nav's count
    await inbox.disconnect()


async def test_a_decision_takes_the_row_out_and_the_card_says_who_decided(
    tenant_a, reviewer_a, lead_a
):
    from approvals.models import Approval
    from approvals.services.decisions import approval_decide

    api = await admit(tenant_a)
    await request_call(api)
    inbox, _ = await open_socket("/ws/inbox/", reviewer_a)
    await hello(inbox)
    approval = await sync_to_async(Approval.objects.select_related("run__tenant").get)()
    await sync_to_async(approval_decide)(approval=approval, viewer=lead_a, decision="approve")
    frames = "".join(await frames_until(inbox, has(f'id="approval-{approval.public_id}"')))
    assert f'hx-swap-oob="delete:#desk-row-{approval.public_id}"' in frames
    assert "decided-status" in frames and "decision-form" not in frames
    assert 'id="nav-pending-count"' in frames and ">0<span" in frames  # pushed first
    await inbox.disconnect()


async def test_a_viewer_sees_rows_without_controls(tenant_a, viewer_a):
    api = await admit(tenant_a)
    inbox, _ = await open_socket("/ws/inbox/", viewer_a)
    await hello(inbox)
    await request_call(api)
    frames = "".join(await frames_until(inbox, has("desk-row-")))
    assert "desk-check" not in frames and "read-only" in frames
    await inbox.disconnect()


async def test_the_principal_of_the_run_gets_no_card_of_their_own_run(tenant_a, reviewer_a):
    api = await admit(tenant_a, principal=reviewer_a)
    inbox, _ = await open_socket("/ws/inbox/", reviewer_a)
    await hello(inbox)
    await request_call(api)
    frames = "".join(await frames_until(inbox, has("nav-pending-count")))
    assert "desk-row-" not in frames  # no one decides a call of a run for themselves
    await inbox.disconnect()


async def test_filters_keep_other_tools_out(tenant_a, reviewer_a):
    api = await admit(tenant_a)
    inbox, _ = await open_socket("/ws/inbox/?tool=refund_payment", reviewer_a)
    await hello(inbox)
    await request_call(api)
    frames = "".join(await frames_until(inbox, has("nav-pending-count")))
    assert "desk-row-" not in frames
    await inbox.disconnect()


async def test_another_tenant_hears_nothing_while_this_one_does(tenant_a, reviewer_a, reviewer_b):
    api = await admit(tenant_a)
    ours, _ = await open_socket("/ws/inbox/", reviewer_a)
    theirs, _ = await open_socket("/ws/inbox/", reviewer_b)
    await hello(ours)
    await hello(theirs)
    await request_call(api)
    await frames_until(ours, has("desk-row-"))
    assert await theirs.receive_nothing(timeout=0.5)
    await ours.disconnect()
    await theirs.disconnect()


async def test_the_inbox_needs_a_capability_but_the_nav_count_does_not(tenant_a):
    nobody = await sync_to_async(PrincipalFactory)(tenant=tenant_a, password="nobody-pass-123")
    role = await sync_to_async(Role.objects.create)(
        tenant=tenant_a, name="budgets", capabilities=["view_budgets"]
    )
    await sync_to_async(nobody.roles.add)(role)
    inbox, _ = await open_socket("/ws/inbox/", nobody)
    assert await close_code(inbox) == 4403
    count, connected = await open_socket("/ws/inbox/?only=count", nobody)
    assert connected
    assert 'id="nav-pending-count"' in "".join(await hello(count))
    await count.disconnect()


async def test_the_run_page_replaces_a_decided_card_in_place(tenant_a, reviewer_a, lead_a):
    from approvals.models import Approval
    from approvals.services.decisions import approval_decide

    api = await admit(tenant_a)
    await request_call(api)
    page, _ = await open_socket(f"/ws/runs/{RUN}/", reviewer_a)
    await hello(page)
    approval = await sync_to_async(Approval.objects.select_related("run__tenant").get)()
    await sync_to_async(approval_decide)(approval=approval, viewer=lead_a, decision="deny")
    frames = await frames_until(page, has(f'id="approval-{approval.public_id}"'))
    assert 'id="run-approvals"' not in frames[-1]  # only the card: typed text elsewhere stays
    await page.disconnect()
