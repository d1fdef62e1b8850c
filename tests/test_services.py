"""The suite really runs on the production services when CI says so (MCP_REQUIRE_SERVICES=1).

Without that flag these tests skip on the embedded defaults; with it, a missing service is a failure.
"""

from __future__ import annotations

import os
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from tests.conftest import REQUIRE_SERVICES

pytestmark = pytest.mark.services


def _require(configured: bool, what: str) -> None:
    if not configured:
        if REQUIRE_SERVICES:
            pytest.fail(f"MCP_REQUIRE_SERVICES=1 but {what} is not configured")
        pytest.skip(f"{what} is not configured (embedded defaults)")


@pytest.mark.django_db
def test_database_is_postgresql():
    _require(bool(os.environ.get("DATABASE_URL")), "DATABASE_URL")
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("select version()")
        assert "PostgreSQL" in cursor.fetchone()[0]


def test_channel_layer_is_redis_and_delivers_across_a_group():
    _require(bool(settings.REDIS_URL), "REDIS_URL")
    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisChannelLayer"

    async def round_trip() -> dict:
        channel = await layer.new_channel()
        group = f"test.{uuid.uuid4().hex}"
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "mcp.broadcast", "message": {"ok": True}})
        received = await layer.receive(channel)
        await layer.group_discard(group, channel)
        return received

    assert async_to_sync(round_trip)()["message"] == {"ok": True}


def test_cache_is_redis():
    _require(bool(settings.REDIS_URL), "REDIS_URL")
    key = f"mcp-test-{uuid.uuid4().hex}"
    cache.set(key, "value", 10)
    assert cache.get(key) == "value"
    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache")


def test_the_channel_layer_pool_carries_more_concurrent_commands_than_redis_pys_default():
    """redis-py 8's asyncio pool stops at 100 connections and raises instead of waiting. The pool channels-redis
    builds from our layer config must serve 150 commands in flight at once (blocking pops here, each holding a
    connection, as the commands of many concurrent streamed calls do)."""
    import asyncio

    import redis.asyncio
    from channels_redis.utils import create_pool

    from mcp_app.channel_layer import redis_layer_config

    _require(bool(settings.REDIS_URL), "REDIS_URL")
    count = 150
    host = redis_layer_config(settings.REDIS_URL)["CONFIG"]["hosts"][0]

    async def many() -> list[object]:
        pool = create_pool(host)  # exactly what RedisChannelLayer does with each host
        client = redis.asyncio.Redis(connection_pool=pool)
        probe = redis.asyncio.Redis.from_url(settings.REDIS_URL)
        keys = [f"test-pool:{uuid.uuid4().hex}" for _ in range(count)]
        pops = [asyncio.ensure_future(client.blpop([key], timeout=15)) for key in keys]
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while (await probe.info("clients"))["blocked_clients"] < count:
                failed = [pop for pop in pops if pop.done()]
                if failed:
                    await failed[0]  # raises what broke it (MaxConnectionsError with the default pool)
                assert asyncio.get_running_loop().time() < deadline, "the pops never all blocked"
                await asyncio.sleep(0.01)
            for index, key in enumerate(keys):
                await client.rpush(key, index)
            return await asyncio.wait_for(asyncio.gather(*pops), 15)
        finally:
            for pop in pops:
                pop.cancel()
            await asyncio.gather(*pops, return_exceptions=True)
            await probe.aclose()
            await pool.disconnect()

    received = async_to_sync(many)()
    assert [int(value) for _key, value in received] == list(range(count))
