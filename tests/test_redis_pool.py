"""``mcp_app.redis_pool`` on a real Redis: a pool opens at most ``REDIS_MAX_CONNECTIONS`` (more commands wait for
a free connection), and closes connections idle for ``REDIS_IDLE_SECONDS``; the channel layer's pools are such
pools. Connections are counted by Redis (``CLIENT LIST``, by a client name of the test's own)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.conftest import require_redis
from tests.helpers import wait_until

pytestmark = pytest.mark.services

IDLE_SECONDS = 0.3


@pytest.fixture
def bounds(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "REDIS_MAX_CONNECTIONS": 4, "REDIS_IDLE_SECONDS": IDLE_SECONDS}


async def named_clients(name: str) -> int:
    import redis.asyncio as redis

    probe = redis.Redis.from_url(require_redis())
    try:
        return sum(1 for client in await probe.client_list() if client.get("name") == name)
    finally:
        await probe.aclose()


async def test_a_pool_opens_at_most_its_bound_and_closes_idle_connections(bounds: None) -> None:
    import redis.asyncio as redis

    from mcp_app.channel_layer import SOCKET_TIMEOUT_SECONDS
    from mcp_app.redis_pool import bounded_pool, redis_connection_options

    name = f"pooltest{uuid.uuid4().hex[:8]}"
    options = redis_connection_options(socket_timeout=SOCKET_TIMEOUT_SECONDS)
    pool = bounded_pool(require_redis(), client_name=name, **options)
    client = redis.Redis.from_pool(pool)
    try:
        # 20 commands that each hold a connection for 0.2 s: 4 at a time, none refused.
        results = await asyncio.gather(*(client.blpop([f"{name}:nothing"], timeout=0.2) for _ in range(20)))
        assert results == [None] * 20
        assert await named_clients(name) == 4
        await wait_until(lambda: _zero(name), timeout=5.0, what="the idle connections closed")
        assert pool.open_idle() == 0
        assert await client.ping()  # a closed connection reconnects on its next use
    finally:
        await client.aclose()


async def _zero(name: str) -> bool:
    return await named_clients(name) == 0


async def test_the_channel_layer_pool_is_bounded(bounds: None) -> None:
    from mcp_app.channel_layer import redis_layer_config
    from mcp_app.redis_layer import RedisChannelLayer
    from mcp_app.redis_pool import BoundedConnectionPool

    layer = RedisChannelLayer(hosts=redis_layer_config(require_redis())["CONFIG"]["hosts"], prefix="pooltest")
    try:
        pool = layer.connection(0).connection_pool
        assert isinstance(pool, BoundedConnectionPool)
        assert pool.max_connections == 4
    finally:
        await layer.flush()
