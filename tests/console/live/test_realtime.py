"""The listeners' fan-out (console/realtime.py): one layer subscription per group per process,
every local listener served in order, a failing listener not the others' problem; and a socket
that hears an event while it is still sending its state handles it right after the state."""

import asyncio

import pytest
from channels.layers import get_channel_layer

from console.live import realtime
from tests.support.runs_live import RUN, admit, has, post_events
from tests.support.sockets import frames_until, hello, open_socket

pytestmark = pytest.mark.django_db(transaction=True)


class Listener:
    def __init__(self, name, heard, *, fails=False):
        self.name, self.heard, self.fails = name, heard, fails

    async def deliver(self, message):
        self.heard.append((self.name, message["n"]))
        if self.fails:
            raise RuntimeError("this listener breaks")


def counting(monkeypatch, layer, method: str) -> list:
    calls = []
    original = getattr(layer, method)

    async def counted(*args, **kwargs):
        calls.append(args)
        return await original(*args, **kwargs)

    monkeypatch.setattr(layer, method, counted)
    return calls


async def until(condition, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_listeners_of_a_group_share_one_subscription_and_hear_in_order(monkeypatch):
    layer = get_channel_layer()
    adds = counting(monkeypatch, layer, "group_add")
    discards = counting(monkeypatch, layer, "group_discard")
    fanout = realtime.Fanout.here()
    group, heard = "test.fanout.order", []
    listeners = [Listener(i, heard, fails=(i == 1)) for i in range(3)]
    for listener in listeners:
        await fanout.join(group, listener)
    assert len(adds) == 1 and fanout.listeners(group) == 3
    for n in (1, 2):
        await layer.group_send(group, {"type": "test", "n": n})
    await until(lambda: len(heard) == 6)
    # Each message reaches every listener, the failing one included, before the next message.
    assert heard == [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (2, 2)]
    for listener in listeners[:2]:
        await fanout.leave(group, listener)
    assert discards == [] and fanout.listeners(group) == 1
    await fanout.leave(group, listeners[2])
    assert len(discards) == 1 and fanout.listeners(group) == 0


async def test_a_thousand_sockets_would_cost_one_subscription(monkeypatch, tenant_a, viewer_a):
    """Sockets on one run: one layer subscription for the run's group, not one per socket;
    the last socket to leave drops it."""
    await admit(tenant_a)
    adds = counting(monkeypatch, get_channel_layer(), "group_add")
    sockets = [(await open_socket(f"/ws/runs/{RUN}/", viewer_a))[0] for _ in range(4)]
    for socket in sockets:
        await hello(socket)
    group = realtime.run_group(tenant_a.pk, RUN)
    assert [args[0] for args in adds].count(group) == 1
    assert realtime.Fanout.here().listeners(group) == 4
    for socket in sockets:
        await socket.disconnect()
    await until(lambda: realtime.Fanout.here().listeners(group) == 0)


async def test_an_event_heard_while_the_state_is_sent_comes_right_after_it(
    monkeypatch, tenant_a, viewer_a
):
    from runs.consumers import RunConsumer

    api = await admit(tenant_a)
    send_state = RunConsumer.send_state

    async def slow_state(self):
        # An event lands after the socket joined its groups, before its state is out.
        todos = [{"id": "t1", "content": "Heard early", "status": "pending"}]
        await post_events(api, {"seq": 1, "type": "todos.updated", "todos": todos})
        await asyncio.sleep(0.2)  # the fan-out hands it over meanwhile: it waits
        await send_state(self)

    monkeypatch.setattr(RunConsumer, "send_state", slow_state)
    handled = []
    handle = RunConsumer._handle

    async def spy(self, message):
        handled.append(message["seq"])
        await handle(self, message)

    monkeypatch.setattr(RunConsumer, "_handle", spy)
    socket, _ = await open_socket(f"/ws/runs/{RUN}/?seq=0", viewer_a)
    frames = await frames_until(socket, has('"hello"'))
    assert 'id="run-todos"' in frames[0] and "Heard early" in frames[0]  # the state comes first
    assert all('"resync"' not in f for f in frames)
    # The event heard early was handled after the state: the state holds it, so nothing more.
    await until(lambda: handled == [1])
    assert await socket.receive_nothing(timeout=0.3)
    todos = [{"id": "t1", "content": "Heard later", "status": "done"}]
    await post_events(api, {"seq": 2, "type": "todos.updated", "todos": todos})
    assert 'id="run-todos"' in (await frames_until(socket, has("Heard later")))[-1]
    await socket.disconnect()


def test_a_sync_publish_sends_every_group_in_one_hop_concurrently(monkeypatch):
    """A sync caller (a view's thread) hands one message for all its groups to the loop at once:
    the groups are sent concurrently, and a group the layer refuses is logged, not fatal."""
    layer = get_channel_layer()
    started, finished = [], []

    async def group_send(group, message):
        started.append(group)
        await asyncio.sleep(0.05)  # a slow layer: sequential sends would take 0.15 s
        if group == "g.bad":
            raise ConnectionError("refused")
        finished.append((group, message["n"]))

    monkeypatch.setattr(layer, "group_send", group_send)
    loop = asyncio.get_event_loop_policy().new_event_loop()
    monkeypatch.setattr(realtime._PublisherLoop, "loop", loop)
    import threading
    import time

    threading.Thread(target=loop.run_forever, daemon=True).start()
    try:
        t = time.perf_counter()
        realtime._send(["g.run", "g.bad", "g.inbox"], {"n": 1})
        took = time.perf_counter() - t
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert started == ["g.run", "g.bad", "g.inbox"]  # in the order given: the run's first
    assert sorted(finished) == [("g.inbox", 1), ("g.run", 1)]
    assert took < 0.12  # concurrent: about one send's time, not three


async def _in_a_servers_thread(view):
    """Run `view` in a sync thread of a server's loop (as a view under daphne runs)."""
    from asgiref.sync import sync_to_async

    result = {}

    async def app(scope, receive, send):
        result["value"] = await sync_to_async(view)()

    await realtime.serving(app)({"type": "http"}, None, None)
    return result["value"]


async def test_a_servers_thread_hands_its_messages_over_and_they_go_out_in_order(monkeypatch):
    """A view's thread under daphne does not wait for the layer: its messages are handed to
    the loop and published there one after another, in the order they were handed over."""
    layer = get_channel_layer()
    release, sent = asyncio.Event(), []

    async def group_send(group, message):
        await release.wait()  # a layer that answers only when the test says so
        sent.append((group, message["n"]))

    monkeypatch.setattr(layer, "group_send", group_send)

    def view():
        for n in (1, 2, 3):
            realtime._send(["g.a", "g.b"], {"type": "test", "n": n})
        return list(sent)

    assert await _in_a_servers_thread(view) == []  # the thread went on before any send
    release.set()
    await until(lambda: len(sent) == 6)
    assert [n for g, n in sent if g == "g.a"] == [1, 2, 3]
    assert [n for g, n in sent if g == "g.b"] == [1, 2, 3]


async def test_a_full_outbox_drops_new_messages_and_says_so(monkeypatch, caplog):
    """A layer that stopped answering cannot make a process hold every message forever: past
    OUTBOX_LIMIT waiting, a new one is dropped and logged (a hint: pages re-read later)."""
    layer = get_channel_layer()
    release, sent = asyncio.Event(), []

    async def group_send(group, message):
        await release.wait()
        sent.append(message["n"])

    monkeypatch.setattr(layer, "group_send", group_send)
    monkeypatch.setattr(realtime, "OUTBOX_LIMIT", 1)

    def view():
        for n in range(5):
            realtime._send(["g.full"], {"type": "test", "n": n})

    await _in_a_servers_thread(view)
    await asyncio.sleep(0.05)
    release.set()
    await asyncio.sleep(0.1)
    dropped = [r for r in caplog.records if "outbox full" in r.getMessage()]
    assert 1 <= len(sent) <= 2  # the one sending when the others came, and the one waiting
    assert len(dropped) == 5 - len(sent)
    assert sent == sorted(sent)


def test_sync_code_publishes_on_a_servers_loop_only():
    """A sync view's thread under daphne publishes on daphne's loop; the short-lived loop that
    async_to_sync makes for an async view under WSGI is never used (it may stop between the
    check and the send, and the sender would then wait SEND_TIMEOUT for nothing)."""
    from asgiref.sync import async_to_sync, sync_to_async

    seen = {}

    async def async_view(name):
        seen[name] = await sync_to_async(realtime._outer_loop)()
        return asyncio.get_running_loop()

    loop = async_to_sync(async_view)("wsgi")
    assert seen["wsgi"] is None and loop is not None  # not a server's loop

    async def app(scope, receive, send):
        seen["server"] = await sync_to_async(realtime._outer_loop)()
        seen["running"] = asyncio.get_running_loop()

    async_to_sync(realtime.serving(app))({"type": "http"}, None, None)
    assert seen["server"] is seen["running"]  # the loop the application was called on


async def test_a_publish_wakes_this_loops_waiters_without_the_layer(monkeypatch):
    """A decision published in the process where its long-poll or held MCP call waits wakes
    that wait at once, not after the layer's round trip; a live page's listener of the same
    group hears the message from the layer only (once). Here the layer carries nothing."""
    layer = get_channel_layer()
    sent = []

    async def group_send(group, message):
        sent.append(group)  # a layer that never delivers

    monkeypatch.setattr(layer, "group_send", group_send)
    group, heard = "test.wake.here", []
    page = Listener("page", heard)
    fanout = realtime.Fanout.here()
    await fanout.join(group, page)
    try:
        async with realtime.wait_for(group) as woken, realtime.wait_for("test.other") as other:
            assert not await woken.wait(0.05)  # nothing published yet
            realtime._send([group], {"type": "test", "n": 1})
            assert await woken.wait(1.0)
            assert not await other.wait(0.05)  # a waiter of another group stays asleep
        await until(lambda: sent == [group])
        assert heard == []  # not delivered locally to a page's listener
    finally:
        await fanout.leave(group, page)


async def test_a_woken_waiter_hearing_the_layer_too_is_woken_once_more_harmlessly():
    """With a layer that delivers (the in-process one here), the waiter is woken by the local
    wake and again by the layer: each wait after a wake returns at most one extra time."""
    group = "test.wake.twice"
    async with realtime.wait_for(group) as woken:
        realtime._send([group], {"type": "test", "n": 1})
        assert await woken.wait(1.0)
        await asyncio.sleep(0.1)  # the layer's copy arrives meanwhile
        await woken.wait(0.05)  # the layer's copy (if it came after the first wait)
        assert not await woken.wait(0.05)  # then quiet: nothing else was published


class Heard:
    def __init__(self):
        self.event = asyncio.Event()

    async def deliver(self, message):
        self.event.set()


async def _wake_after_a_quiet_moment(fanout, layer) -> float:
    """Seconds from a publish to its listener, for a group joined right after the process's
    last listener left (a runtime's next long-poll after its last one answered)."""
    loop = asyncio.get_running_loop()
    first = Heard()
    await fanout.join("quiet.first", first)
    await asyncio.sleep(0.15)  # past the receiver's start (its first look may find nothing)
    await fanout.leave("quiet.first", first)  # this process listens to nothing now
    await asyncio.sleep(0.02)
    second = Heard()
    await fanout.join("quiet.second", second)
    started = loop.time()
    await layer.group_send("quiet.second", {"type": "probe", "n": 1})
    await asyncio.wait_for(second.event.wait(), 5)
    return loop.time() - started


async def test_a_group_joined_right_after_the_last_listener_left_hears_at_once():
    """channels_redis's receiver sleeps 100 ms once its connection is subscribed to nothing;
    the loop's anchor channel (Fanout._anchor) keeps it subscribed, so this wake is not
    held until that sleep ends (it was: ~80 ms)."""
    layer = get_channel_layer()
    if not realtime._watched(layer):
        pytest.skip("the idle sleep is channels_redis's pub/sub receiver's (REDIS_URL unset)")
    assert await _wake_after_a_quiet_moment(realtime.Fanout(), layer) < 0.05
