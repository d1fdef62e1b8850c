"""The invalidation backends and what the request path does when the log cannot be followed.

With Redis unreachable, requests are still served, from the database (the caches step aside: every request
queries again and sees every change at once); once the log is followed again, caches fill again. The database
backend carries a change from one follower to another through its table.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_app import invalidation
from mcp_app.models import AgentToken, CacheInvalidation
from tests.helpers import call, rpc
from tests.request_path import counting, wait_caches_ready

ECHO = rpc("tools/call", {"name": "async_echo", "arguments": {"text": "hi"}})


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_unreachable(use_backend: Any) -> None:
    use_backend("INVALIDATION", invalidation.RedisInvalidation(url=f"redis://127.0.0.1:{closed_port()}/0"))


async def test_with_redis_unreachable_requests_are_served_from_the_database_and_see_changes_at_once(
    redis_unreachable: None, make_access: Callable[..., Awaitable[Any]], orm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    access = await make_access(tools=("async_echo",))
    assert not invalidation.healthy()
    for _ in range(2):
        with counting(monkeypatch) as cost:
            reply = await call(access, ECHO)
        assert reply.status == 200
        assert cost.queries, "nothing may be served from a cache that cannot hear about changes"
        assert cost.hops == ["_admit"]
    await orm(lambda: AgentToken.objects.get(pk=access.token.pk).revoke())
    assert (await call(access, ECHO)).status == 401


def test_a_change_published_through_the_database_reaches_another_follower(transactional_db: None) -> None:
    heard: list[frozenset[str] | None] = []
    arrived = threading.Event()

    def listener(keys: frozenset[str] | None) -> None:
        if keys is not None and "token:7" in keys:
            heard.append(keys)
            arrived.set()

    invalidation.register(listener)
    follower = invalidation.DatabaseInvalidation(poll_seconds=0.02)
    publisher = invalidation.DatabaseInvalidation()
    try:
        assert follower.wait_healthy(5)
        publisher.publish(["token:7", "agent:2"])
        assert arrived.wait(5), "the follower did not read the change"
        assert heard == [frozenset({"token:7", "agent:2"})]
        assert list(CacheInvalidation.objects.values_list("keys", flat=True)) == ["token:7 agent:2"]
    finally:
        follower.stop()
        invalidation._appliers.remove(listener)


def test_a_change_published_through_redis_reaches_another_follower_but_not_its_publisher(settings: Any) -> None:
    from tests.conftest import REQUIRE_SERVICES

    if not settings.REDIS_URL:
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but REDIS_URL is not configured")
        pytest.skip("needs REDIS_URL")
    heard: list[frozenset[str]] = []
    arrived = threading.Event()

    def listener(keys: frozenset[str] | None) -> None:
        if keys is not None and any(key.startswith("test:") for key in keys):
            heard.append(keys)
            arrived.set()

    invalidation.register(listener)
    key = f"mcp:test-invalidation:{closed_port()}"
    follower = invalidation.RedisInvalidation(url=settings.REDIS_URL, key=key)
    try:
        assert follower.wait_healthy(5)
        follower.publish(["test:own"])  # its own entry: applied when published, skipped when read back
        invalidation.RedisInvalidation(url=settings.REDIS_URL, key=key).publish(["test:other"])
        assert arrived.wait(5), "the follower did not read the change"
        assert heard == [frozenset({"test:other"})]
    finally:
        follower.stop()
        invalidation._appliers.remove(listener)
        import redis

        redis.Redis.from_url(settings.REDIS_URL).delete(key)


def test_a_load_that_raced_an_invalidation_is_not_stored() -> None:
    from mcp_app.caching.identity import EntryCache

    cache: EntryCache[str] = EntryCache("test")
    wait_caches_ready()
    try:
        before = invalidation.generation()
        invalidation.apply(["token:1"])  # lands while the load runs
        cache.put("k", "stale", frozenset({"token:1"}), before)
        assert cache.get("k") is None
        now = invalidation.generation()
        cache.put("k", "fresh", frozenset({"token:1"}), now)
        assert cache.get("k") == "fresh"
        invalidation.apply(["token:1"])
        assert cache.get("k") is None
    finally:
        invalidation._appliers.remove(cache._invalidate)
