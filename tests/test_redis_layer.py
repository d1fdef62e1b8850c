"""``mcp_app.redis_layer.RedisChannelLayer`` on a real Redis: channels-redis's semantics (delivery to process-local
and general channels, groups across layers, capacity, expiry), interchangeable with the stock layer in either
direction, in fewer round trips: ``send`` one, ``group_add`` one, ``group_send`` two for any group on one host, and
the group joins and leaves of one turn of the event loop one together."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.exceptions import ChannelFull

from tests.conftest import require_redis
from tests.helpers import RedisRoundTrips

pytestmark = pytest.mark.services

WAIT = 5.0


def _host() -> dict[str, Any]:
    from mcp_app.channel_layer import redis_layer_config

    host: dict[str, Any] = redis_layer_config(require_redis())["CONFIG"]["hosts"][0]
    return host


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A key prefix of the test's own, so that flushing it touches nothing else on this Redis."""
    yield f"layertest{uuid.uuid4().hex[:8]}"


def _fast(prefix: str, **config: Any) -> Any:
    from mcp_app.redis_layer import RedisChannelLayer

    return RedisChannelLayer(hosts=[_host()], prefix=prefix, **config)


def _stock(prefix: str, **config: Any) -> Any:
    from channels_redis.core import RedisChannelLayer

    return RedisChannelLayer(hosts=[_host()], prefix=prefix, **config)


async def _close(*layers: Any) -> None:
    for layer in layers:
        await layer.flush()
        await layer.close_pools()


async def test_send_add_and_group_send_take_one_one_and_two_round_trips(prefix: str, monkeypatch: Any) -> None:
    layer = _fast(prefix)
    try:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "warm"})  # connects
        assert (await asyncio.wait_for(layer.receive(channel), WAIT))["type"] == "warm"
        trips = RedisRoundTrips(monkeypatch)
        await layer.send(channel, {"type": "one"})
        assert trips.count == 1
        await layer.group_add("g", channel)
        assert trips.count == 2
        await layer.group_send("g", {"type": "two"})
        assert trips.count == 4
    finally:
        monkeypatch.undo()
        await _close(layer)


async def test_the_group_adds_and_discards_of_one_turn_take_one_round_trip(prefix: str, monkeypatch: Any) -> None:
    layer = _fast(prefix)
    try:
        channels = [await layer.new_channel() for _ in range(4)]
        await layer.group_add("warm", channels[0])  # connects
        trips = RedisRoundTrips(monkeypatch)
        await asyncio.gather(*(layer.group_add(f"g{n}", channel) for n, channel in enumerate(channels)))
        assert trips.sent == ["PIPELINE"]
        await layer.group_send("g2", {"type": "joined"})
        assert (await asyncio.wait_for(layer.receive(channels[2]), WAIT))["type"] == "joined"
        sent = trips.count
        await asyncio.gather(*(layer.group_discard(f"g{n}", channel) for n, channel in enumerate(channels)))
        assert trips.count == sent + 1
        await layer.group_send("g2", {"type": "left"})  # nobody is a member any more
        await layer.send(channels[2], {"type": "direct"})
        assert (await asyncio.wait_for(layer.receive(channels[2]), WAIT))["type"] == "direct"
    finally:
        monkeypatch.undo()
        await _close(layer)


@pytest.mark.parametrize(("sender", "receiver"), [("fast", "stock"), ("stock", "fast"), ("fast", "fast")])
async def test_messages_cross_between_the_stock_layer_and_this_one(prefix: str, sender: str, receiver: str) -> None:
    make = {"fast": _fast, "stock": _stock}
    tx, rx = make[sender](prefix), make[receiver](prefix)
    try:
        local = await rx.new_channel()
        general = f"general.{uuid.uuid4().hex}"
        await tx.send(local, {"type": "direct", "n": 1})
        await tx.send(general, {"type": "general", "text": "naïve ☃"})
        await rx.group_add("both", local)
        await tx.group_add("both", general)
        await tx.group_send("both", {"type": "fanned", "n": 2})
        assert await asyncio.wait_for(rx.receive(local), WAIT) == {"type": "direct", "n": 1}
        assert await asyncio.wait_for(rx.receive(local), WAIT) == {"type": "fanned", "n": 2}
        assert await asyncio.wait_for(rx.receive(general), WAIT) == {"type": "general", "text": "naïve ☃"}
        assert await asyncio.wait_for(rx.receive(general), WAIT) == {"type": "fanned", "n": 2}
        await rx.group_discard("both", local)
        await tx.group_send("both", {"type": "after"})
        assert await asyncio.wait_for(rx.receive(general), WAIT) == {"type": "after"}
        with pytest.raises(TimeoutError):  # the discarded channel no longer hears the group
            await asyncio.wait_for(rx.receive(local), 0.3)
    finally:
        await _close(tx, rx)


async def test_a_group_send_reaches_every_channel_of_two_processes_layers_once(prefix: str) -> None:
    tx, first, second = _fast(prefix), _fast(prefix), _fast(prefix)
    try:
        channels = [await first.new_channel(), await first.new_channel(), await second.new_channel()]
        for channel in channels:
            await tx.group_add("many", channel)
        await tx.group_send("many", {"type": "all"})
        for layer, channel in zip((first, first, second), channels, strict=True):
            assert await asyncio.wait_for(layer.receive(channel), WAIT) == {"type": "all"}
        for layer, channel in zip((first, first, second), channels, strict=True):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(layer.receive(channel), 0.2)
    finally:
        await _close(tx, first, second)


async def test_a_full_channel_refuses_a_send_and_a_group_send_skips_it(prefix: str) -> None:
    layer = _fast(prefix, capacity=2)
    try:
        channel = f"full.{uuid.uuid4().hex}"
        await layer.send(channel, {"type": "1"})
        await layer.send(channel, {"type": "2"})
        with pytest.raises(ChannelFull):
            await layer.send(channel, {"type": "3"})
        await layer.group_add("full", channel)
        await layer.group_send("full", {"type": "4"})  # over capacity: dropped, as channels-redis does
        received = [(await asyncio.wait_for(layer.receive(channel), WAIT))["type"] for _ in range(2)]
        assert received == ["1", "2"]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(channel), 0.2)
    finally:
        await _close(layer)


async def test_expired_messages_are_dropped_before_a_send_counts_capacity(prefix: str) -> None:
    layer = _fast(prefix, capacity=1, expiry=1)
    try:
        channel = f"expiry.{uuid.uuid4().hex}"
        connection = layer.connection(0)
        # A message older than the expiry (its score is when it was sent): it no longer counts.
        await connection.zadd(layer.prefix + channel, {layer.serialize({"type": "stale"}): 1.0})
        await layer.send(channel, {"type": "fresh"})
        assert await asyncio.wait_for(layer.receive(channel), WAIT) == {"type": "fresh"}
    finally:
        await _close(layer)
