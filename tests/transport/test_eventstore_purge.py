"""The event-store purge that ``mcp_purge`` and Celery beat run: expired streams go, live ones stay."""

from __future__ import annotations

import gc
import uuid

import orjson
import pytest
from django.test import override_settings

from mcp_app.transport.eventstore import MemoryEventStore, RedisEventStore, get_event_store, purge_event_store
from tests.conftest import REQUIRE_SERVICES


async def test_the_memory_store_drops_streams_older_than_the_ttl():
    store = MemoryEventStore()
    await store.append_many("old-stream", [(1, {"n": 1})])
    with override_settings(MCP_APP={"EVENT_STORE_TTL_SECONDS": 0}):
        assert store.purge_expired(dry_run=True) == 1
        assert await store.after("old-stream", 0) == [(1, {"n": 1})]  # a dry run only counts
        assert store.purge_expired() == 1
    assert await store.after("old-stream", 0) == []
    await store.append_many("new-stream", [(1, {"n": 1})])
    assert store.purge_expired() == 0  # the default TTL has not passed
    assert await store.after("new-stream", 0) == [(1, {"n": 1})]


async def test_the_memory_store_keeps_events_encoded_out_of_the_collectors_sight():
    """A process keeps up to 10,000 streams' events: as objects, every full garbage collection would walk them."""
    store = MemoryEventStore()
    events = [
        (n, {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}}) for n in range(1, 201)
    ]
    gc.collect()
    tracked = len(gc.get_objects())
    await store.append_many("stream", events)
    gc.collect()
    assert len(gc.get_objects()) - tracked < 20, "200 kept events must not be 200 objects the collector walks"
    events[0][1]["params"]["progress"] = 0  # the store kept what was sent, not the object
    assert await store.after("stream", 0) == [
        (1, {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}),
        *events[1:],
    ]


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


HUNDRED_KB = "x" * 100_000


async def test_a_session_call_of_100_kb_events_no_longer_pins_megabytes_in_redis():
    """Issue 19's figure: one session call whose events carried 100 KB each pinned 11.6 MB in Redis for an hour.
    116 such events (11.6 MB) now leave at most the default ``EVENT_STORE_MAX_BYTES`` (1 MiB) in the stream's key,
    the newest ones, dropped oldest first in the append's own round trip."""
    import secrets

    import redis

    from mcp_app.conf import mcp_settings
    from tests.conftest import require_redis

    url = require_redis()
    prefix = f"test-bytes-{secrets.token_hex(4)}"
    store = RedisEventStore(url, prefix=prefix)
    for n in range(1, 117):
        await store.append_many("s", [(n, {"progress": n, "message": HUNDRED_KB})])
    kept = await store.after("s", 0)
    client = redis.Redis.from_url(url)
    try:
        pinned = client.memory_usage(f"{prefix}:s") or 0
        counted = int(client.get(f"{prefix}:s:bytes") or 0)
        assert client.ttl(f"{prefix}:s") > 0 and client.ttl(f"{prefix}:s:bytes") > 0
    finally:
        client.delete(f"{prefix}:s", f"{prefix}:s:bytes")
        client.close()
    assert [n for n, _ in kept] == list(range(117 - len(kept), 117))  # the newest, in order
    assert counted == sum(len(orjson.dumps([n, m])) for n, m in kept) <= mcp_settings.EVENT_STORE_MAX_BYTES
    assert pinned < 1.2 * mcp_settings.EVENT_STORE_MAX_BYTES, f"{pinned} bytes pinned"


async def test_the_memory_store_is_bounded_in_bytes_per_stream_too():
    store = MemoryEventStore(max_bytes=250_000)
    for n in range(1, 11):
        await store.append_many("s", [(n, {"message": HUNDRED_KB})])
    assert [n for n, _ in await store.after("s", 0)] == [9, 10]
    store = MemoryEventStore(max_bytes=1)  # the newest event is always kept
    await store.append_many("s", [(1, {"message": HUNDRED_KB}), (2, {"message": HUNDRED_KB})])
    assert [n for n, _ in await store.after("s", 0)] == [2]


@pytest.fixture(params=["memory", "redis"])
def bounded_store(request: pytest.FixtureRequest, settings: object) -> object:
    """Each store, with an agent held to 300 kB of events per TTL window and a tenant to 500 kB."""
    settings.MCP_APP = {  # type: ignore[attr-defined]
        **settings.MCP_APP,  # type: ignore[attr-defined]
        "EVENT_STORE_MAX_BYTES_PER_AGENT": 300_000,
        "EVENT_STORE_MAX_BYTES_PER_TENANT": 500_000,
    }
    if request.param == "memory":
        return MemoryEventStore()
    from tests.conftest import require_redis

    return RedisEventStore(require_redis(), prefix=f"test-owner-{uuid.uuid4().hex[:8]}")


async def test_an_agent_and_a_tenant_are_bounded_in_stored_bytes_and_others_are_not(bounded_store):
    """Issue 25: one agent's progress calls pinned 533 MB of Redis in 20 s. Over its agent's (or tenant's) bound
    an append stores nothing and says so; another agent of the tenant stores until the tenant's bound; another
    tenant is untouched."""
    store = bounded_store
    event = {"message": HUNDRED_KB}  # ~100 kB stored
    assert [await store.append_many(f"a1-{n}", [(1, event)], owner=(1, 11)) for n in range(3)] == [True, True, False]
    assert await store.after("a1-2", 0) == []  # nothing of the refused append was kept
    # Same tenant, another agent: the tenant has 200 kB stored, 300 kB left.
    assert [await store.append_many(f"a2-{n}", [(1, event)], owner=(1, 12)) for n in range(3)] == [True, True, False]
    assert await store.append_many("b", [(1, event), (2, event)], owner=(2, 21))  # another tenant
    assert [n for n, _ in await store.after("b", 0)] == [1, 2]
    assert await store.append_many("anonymous", [(n, event) for n in range(1, 5)])  # no owner: the stream's bounds
