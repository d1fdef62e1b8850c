"""``receive_forever``: a receive loop that survives the layer going away and ends when its task is cancelled;
the messaging primitive built on it (subscriptions, request/reply) on both its implementations.

The race the last tests pin down was seen in CI: a ``tasks/result`` waiter tore its status listener down while the
status event arrived; redis-py returned that reply and dropped the ``CancelledError``, and the listener sat in the
next ``BZPOPMIN`` for 5 s before the answer could be written.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings

from mcp_app.channel_layer import layer_health, receive_forever
from tests.conftest import REQUIRE_SERVICES


class _FlakyLayer:
    """Fails ``failures`` receives with a connection error, then delivers ``messages`` in order."""

    def __init__(self, failures: int, messages: list[dict[str, Any]]) -> None:
        self.failures = failures
        self.messages = messages
        self.calls = 0

    async def receive(self, channel: str) -> dict[str, Any]:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise ConnectionError("connection refused")
        if not self.messages:
            await asyncio.Event().wait()
        return self.messages.pop(0)


class _SwallowingLayer:
    """Swallows the first cancellation of a receive and carries on blocking, as redis-py on Python 3.11 does when
    the cancellation lands while it sends ``BZPOPMIN`` through ``asyncio.wait_for``; a second one ends it.
    ``on_swallow`` is called as it swallows one."""

    def __init__(self, on_swallow: Callable[[], object] | None = None) -> None:
        self.receiving = asyncio.Event()
        self.swallowed = 0
        self.on_swallow = on_swallow

    async def receive(self, channel: str) -> dict[str, Any]:
        self.receiving.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.swallowed += 1
            if self.on_swallow is not None:
                self.on_swallow()
        await asyncio.Event().wait()  # the next blocking read: only a second cancellation ends it
        raise AssertionError("unreachable")


def _receives_left() -> list[asyncio.Task[Any]]:
    """The receives of this loop still running."""
    return [task for task in asyncio.all_tasks() if task.get_coro().__qualname__.endswith(".receive")]


async def test_connection_errors_are_retried_and_never_escape():
    layer = _FlakyLayer(failures=3, messages=[{"type": "one"}, {"type": "two"}])
    received = []
    async for message in receive_forever(layer, "specific.test!x"):
        received.append(message["type"])
        if len(received) == 2:
            break
    assert received == ["one", "two"]
    assert layer.calls == 5
    assert layer_health.up  # the successful receive after the outage said so


async def test_a_cancellation_the_layer_swallowed_still_ends_the_loop():
    layer = _SwallowingLayer()

    async def listen() -> None:
        async for _ in receive_forever(layer, "specific.test!x"):
            raise AssertionError("nothing was sent")

    listener = asyncio.ensure_future(listen())
    await asyncio.wait_for(layer.receiving.wait(), timeout=5)
    listener.cancel()
    done, _ = await asyncio.wait([listener], timeout=5)
    assert done, "the listener kept receiving after it was cancelled"
    assert listener.cancelled()
    assert layer.swallowed == 1
    assert not _receives_left()


async def test_a_loop_cancelled_again_while_it_stops_its_receive_still_stops_it():
    """What a closing event loop does to a subscription it finds closing: it cancels every task once more, the
    receive loop while it is still stopping its receive (which swallowed the close's cancellation)."""
    listener: asyncio.Future[None] | None = None

    def loop_closes() -> None:
        assert listener is not None
        listener.cancel()

    layer = _SwallowingLayer(on_swallow=loop_closes)

    async def listen() -> None:
        async for _ in receive_forever(layer, "specific.test!x"):
            raise AssertionError("nothing was sent")

    listener = asyncio.ensure_future(listen())
    await asyncio.wait_for(layer.receiving.wait(), timeout=5)
    listener.cancel()  # the subscription's close
    done, _ = await asyncio.wait([listener], timeout=5)
    assert done and listener.cancelled()
    assert layer.swallowed == 1
    assert not _receives_left(), "a receive outlived its loop, which would wait for it forever when closing"


def _redis_layer() -> Any:
    """A channel layer of this test's own: cancelled receives leave channels-redis's per-process locks bound
    to this test's event loop, which must not leak into the process-wide layer other tests use."""
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    configured = settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("RedisChannelLayer")
    if not configured:
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but the channel layer is not Redis")
        pytest.skip("the channel layer is not Redis (embedded defaults)")
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


@pytest.mark.services
async def test_listeners_cancelled_while_their_message_arrives_end_at_once_on_redis():
    layer = _redis_layer()
    slow = []
    for attempt in range(60):
        channel = await layer.new_channel()
        got = asyncio.Event()

        async def listen(channel: str = channel, got: asyncio.Event = got) -> None:
            async for _ in receive_forever(layer, channel):
                got.set()

        listener = asyncio.ensure_future(listen())
        await asyncio.sleep(0.005)  # in BZPOPMIN
        sending = asyncio.ensure_future(layer.send(channel, {"type": "race"}))
        await asyncio.sleep(random.uniform(0, 0.002))
        listener.cancel()
        done, _ = await asyncio.wait([listener], timeout=2)
        await sending
        if not done:
            slow.append(attempt)
            await asyncio.wait([listener], timeout=10)
    await layer.close_pools()
    assert slow == [], f"cancelled listeners still receiving after 2 s in attempts {slow}"


# The messaging primitive: one behaviour on the in-process bus and on the channel layer.


async def _primitive_behaves(bus: Any) -> None:
    from mcp_app.channel_layer import Correlator

    subscription = await bus.subscribe("g.one")
    try:
        assert await subscription.receive(within=0.05) is None  # bounded: nothing came
        await bus.group_send("g.one", {"type": "x", "n": 1})
        await bus.send(subscription.address, {"type": "x", "n": 2})
        got = [await subscription.receive(within=5), await subscription.receive(within=5)]
        assert sorted(message["n"] for message in got) == [1, 2]
        await subscription.leave("g.one")
        await bus.group_send("g.one", {"type": "x", "n": 3})
        assert await subscription.receive(within=0.2) is None
    finally:
        await subscription.close()

    answers = Correlator()
    heard: list[dict[str, Any]] = []

    def on_message(message: dict[str, Any]) -> bool:
        heard.append(message)
        return answers.resolve(message["id"], message["answer"])

    replies = await bus.subscribe("g.reply", on_message=on_message)
    try:

        async def answered() -> None:
            await bus.group_send("g.reply", {"type": "r", "id": "a", "answer": {"result": {"ok": True}}})

        assert await answers.ask("a", answered, method="m", within=5) == {"result": {"ok": True}}
        await asyncio.wait_for(replies.ended.wait(), 5)  # on_message returned True: receiving ended

        async def unanswered() -> None:
            pass

        timed_out = await answers.ask("b", unanswered, method="sampling/createMessage", within=0.05)
        assert timed_out["error"]["code"] == -32001
        assert timed_out["error"]["message"] == "The client did not answer sampling/createMessage in time"
    finally:
        await replies.close()


async def test_the_messaging_primitive_on_the_in_process_bus() -> None:
    from mcp_app.channel_layer import local_bus

    before = set(local_bus.groups)  # the bus is the process's: other tests' calls may still be members
    await _primitive_behaves(local_bus)
    assert set(local_bus.groups) <= before  # every subscription of this test left every group


@pytest.mark.services
async def test_the_messaging_primitive_on_redis() -> None:
    from mcp_app.channel_layer import LayerMessaging

    layer = _redis_layer()
    try:
        await _primitive_behaves(LayerMessaging(layer))
    finally:
        await layer.close_pools()
