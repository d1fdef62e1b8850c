"""The event-store purge that ``mcp_purge`` and Celery beat run: expired streams go, live ones stay."""

from __future__ import annotations

import uuid

import pytest
from django.test import override_settings

from mcp_app.transport.eventstore import MemoryEventStore, RedisEventStore, get_event_store, purge_event_store
from tests.conftest import REQUIRE_SERVICES


async def test_the_memory_store_drops_streams_older_than_the_ttl():
    store = MemoryEventStore()
    await store.append("old-stream", 1, {"n": 1})
    with override_settings(MCP_APP={"EVENT_STORE_TTL_SECONDS": 0}):
        assert store.purge_expired(dry_run=True) == 1
        assert await store.after("old-stream", 0) == [(1, {"n": 1})]  # a dry run only counts
        assert store.purge_expired() == 1
    assert await store.after("old-stream", 0) == []
    await store.append("new-stream", 1, {"n": 1})
    assert store.purge_expired() == 0  # the default hour has not passed
    assert await store.after("new-stream", 0) == [(1, {"n": 1})]


def test_purge_event_store_purges_the_configured_store():
    assert purge_event_store() == get_event_store().purge_expired() == 0


def test_mcp_purge_includes_the_event_store():
    from mcp_app.maintenance import PURGERS

    assert PURGERS["SSE event streams"] is purge_event_store


def test_the_redis_store_removes_keys_left_without_an_expiry():
    from django.conf import settings

    if not settings.REDIS_URL:
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not configured")
        pytest.skip("needs Redis")
    import redis

    prefix = f"mcp:test-purge:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.zadd(f"{prefix}:orphan", {b"x": 1})
        client.zadd(f"{prefix}:live", {b"x": 1})
        client.expire(f"{prefix}:live", 60)
        assert RedisEventStore(settings.REDIS_URL, prefix=prefix).purge_expired() == 1
        assert not client.exists(f"{prefix}:orphan")
        assert client.exists(f"{prefix}:live")
    finally:
        client.delete(f"{prefix}:orphan", f"{prefix}:live")
        client.close()


async def test_the_redis_store_keeps_the_newest_events_of_a_stream_only():
    import secrets

    from tests.conftest import require_redis

    store = RedisEventStore(require_redis(), prefix=f"test-bound-{secrets.token_hex(4)}", max_events=2)
    await store.append_many("s", [(n, {"n": n}) for n in range(1, 6)])
    assert await store.after("s", 0) == [(4, {"n": 4}), (5, {"n": 5})]
