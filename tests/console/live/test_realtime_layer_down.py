"""The fan-out when the channel layer is down (console/realtime.py): a join that cannot
subscribe says so and is retried when the layer is back; every local listener hears "down"
once and "back" once, after its subscriptions are made again. (Against a real redis-server
stopped and started: tests/outages/test_redis_down.py.)"""

import pytest

from console.live import realtime


class Layer:
    """A channel layer that refuses everything while `down`."""

    def __init__(self):
        self.down = False
        self.subscribed: list[str] = []
        self.channels = 0

    def _check(self):
        if self.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379")

    async def new_channel(self, prefix="specific."):
        self._check()
        self.channels += 1
        return f"{prefix}{self.channels}"

    async def group_add(self, group, channel):
        self._check()
        self.subscribed.append(group)

    async def group_discard(self, group, channel):
        pass

    async def receive(self, channel):
        import asyncio

        await asyncio.Event().wait()  # nothing arrives in these tests


class Listener:
    def __init__(self):
        self.told: list[bool] = []

    async def deliver(self, message):
        pass

    async def layer_changed(self, up):
        self.told.append(up)


class Watch:
    """Stands in for the heartbeat: the tests say what it found."""

    def __init__(self, fanout, layer):
        self.up = True

    def stop(self):
        pass


@pytest.fixture
def layer(monkeypatch):
    layer = Layer()
    monkeypatch.setattr(realtime, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(realtime, "_Watch", Watch)
    return layer


async def test_a_listener_hears_down_once_and_back_once(layer):
    fanout = realtime.Fanout()
    listener = Listener()
    assert await fanout.join("inbox.1", listener)
    assert await fanout.join("user.1", listener)  # one listener in two groups
    await fanout.layer_state(False)
    await fanout.layer_state(False)  # still down: nothing new to say
    assert listener.told == [False]
    assert not fanout.layer_up
    await fanout.layer_state(True)
    await fanout.layer_state(True)
    assert listener.told == [False, True]
    assert layer.subscribed == ["inbox.1", "user.1"]  # the subscriptions held: none made again
    for group in ("inbox.1", "user.1"):
        await fanout.leave(group, listener)


async def test_a_join_while_down_is_made_when_the_layer_is_back(layer):
    fanout = realtime.Fanout()
    layer.down = True
    listener = Listener()
    assert not await fanout.join("run.1.abc", listener)  # the socket says "reconnecting"
    assert fanout.groups["run.1.abc"].failed
    await fanout.layer_state(True)  # the heartbeat is heard, yet the layer still refuses
    assert fanout.groups["run.1.abc"].failed and listener.told == []
    layer.down = False
    await fanout.layer_state(True)
    assert not fanout.groups["run.1.abc"].failed
    assert layer.subscribed == ["run.1.abc"]
    assert listener.told == [True]  # re-read what was missed
    await fanout.leave("run.1.abc", listener)
    assert fanout.groups == {} and fanout.watch is None  # no listener: no heartbeat
