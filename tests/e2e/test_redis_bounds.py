"""What one agent does to a shared Redis stays bounded (issue 25 #1, #2), on two daphnes and a private Redis.

- Connections: one agent opens many GET streams on the first daphne and ends them all at once. At 7eabff9 each
  ended stream left about two idle Redis connections open in that daphne for good, so a Redis with a low
  ``maxclients`` was soon full and another tenant's GET streams on the *other* daphne failed after the attacker
  had left. Counted from Redis's ``INFO clients``.
- Stored events: one agent's progress calls (1 KB progress tokens) pinned 533 MB of Redis in 20 s. The agent is
  now held to ``EVENT_STORE_MAX_BYTES_PER_AGENT`` (lowered for the test): its calls are still answered in full,
  live, while another tenant's events on the other daphne are stored and replayed on resume.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import Access
from tests.helpers import endpoint, initialize, post_headers, sse_frames, wait_until

from .conftest import Daphne, OwnRedis, running_daphne

pytestmark = pytest.mark.e2e

# Low enough that the leak of 7eabff9 fills it (two connections per ended stream), high enough for what two
# daphnes hold at rest plus their bounded pools.
MAXCLIENTS = 400
HOG_STREAMS = 150
OTHER_STREAMS = 20
# What ``REDIS_IDLE_SECONDS`` (the daphnes run with the default) lets a connection idle, plus the machine's slack.
IDLE_WAIT_SECONDS = 30.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    redis = OwnRedis(tmp_path)
    redis.start("--maxclients", str(MAXCLIENTS))
    try:
        yield redis
    finally:
        redis.stop()


def get_headers(access: Access) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {access.raw_token}",
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }


async def open_streams(client: httpx.AsyncClient, url: str, access: Access, count: int) -> list[httpx.Response]:
    """Open ``count`` GET streams at once; each answered with its status (200 streams are left open)."""

    async def one() -> httpx.Response:
        response = await client.send(client.build_request("GET", url, headers=get_headers(access)), stream=True)
        if response.status_code != 200:
            await response.aread()
        return response

    return list(await asyncio.gather(*(one() for _ in range(count))))


def refusals(streams: list[httpx.Response]) -> list[str]:
    return [f"{s.status_code} {s.text[:200]}" for s in streams if s.status_code != 200]


async def test_ended_streams_leave_no_redis_connections_and_another_tenant_is_served(
    transactional_db: None,
    access_factory: Callable[..., Access],
    own_redis: OwnRedis,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from channels.db import database_sync_to_async

    hog = await database_sync_to_async(access_factory)(tools=("echo",))
    other = await database_sync_to_async(access_factory)(tools=("echo",))
    env = {"REDIS_URL": own_redis.url}
    with contextlib.ExitStack() as stack:
        first: Daphne = stack.enter_context(running_daphne(tmp_path_factory, env))
        second: Daphne = stack.enter_context(running_daphne(tmp_path_factory, env))
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=20.0, limits=limits) as client:
            # Both daphnes warmed up (their background connections made) before the baseline is read.
            for server, access in ((first, hog), (second, other)):
                for stream in await open_streams(client, endpoint(server.url, access), access, 2):
                    assert stream.status_code == 200, stream.text
                    await stream.aclose()
            baseline = own_redis.clients()
            for _round in range(2):
                streams = await open_streams(client, endpoint(first.url, hog), hog, HOG_STREAMS)
                assert not refusals(streams), refusals(streams)[:3]
                await asyncio.gather(*(stream.aclose() for stream in streams))
            settled = await wait_until(
                lambda: (n := own_redis.clients()) <= baseline + 10 and n + 1,
                timeout=IDLE_WAIT_SECONDS,
                what=f"Redis clients back near the baseline of {baseline} (now {own_redis.clients()})",
            )
            assert settled - 1 <= baseline + 10
            streams = await open_streams(client, endpoint(second.url, other), other, OTHER_STREAMS)
            try:
                assert not refusals(streams), refusals(streams)[:3]
            finally:
                await asyncio.gather(*(stream.aclose() for stream in streams))
        assert "max number of clients" not in first.stderr() + second.stderr()


AGENT_BOUND = 200_000  # bytes of events per agent per EVENT_STORE_TTL_SECONDS, for the daphnes of the test
PROGRESS_STEPS = 100
HOG_CALLS = 12  # 12 x 100 events of ~1.1 KB: about 1.3 MB, six times the bound
TOKEN = "t" * 1000  # a progress token of 1 KB, repeated in every progress notification


async def open_session(client: httpx.AsyncClient, url: str, access: Access) -> dict[str, str]:
    opened = await client.post(url, json=initialize({}), headers=post_headers(access))
    assert opened.status_code == 200, opened.text
    return post_headers(
        access, **{"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    )


async def progress_call(client: httpx.AsyncClient, url: str, headers: dict[str, str], id: int) -> list[Any]:
    """A progress call; its SSE frames (the priming event first), read to the end."""
    body = {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "progress_demo", "arguments": {"steps": PROGRESS_STEPS}, "_meta": {"progressToken": TOKEN}},
    }
    async with client.stream("POST", url, json=body, headers=headers) as response:
        assert response.status_code == 200
        return [frame async for frame in sse_frames(response)]


def stored_event_bytes(url: str) -> int:
    """The bytes of every event Redis holds (the members of the event store's sorted sets), read from Redis."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match="mcp:events:*", _type="zset"))
        return sum(len(member) for key in keys for member in client.zrange(key, 0, -1))
    finally:
        client.close()


async def test_one_agent_cannot_fill_redis_with_events_and_another_tenants_stay_resumable(
    transactional_db: None,
    access_factory: Callable[..., Access],
    own_redis: OwnRedis,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from channels.db import database_sync_to_async

    hog = await database_sync_to_async(access_factory)()
    other = await database_sync_to_async(access_factory)()
    env = {"REDIS_URL": own_redis.url, "MCP_EVENT_STORE_MAX_BYTES_PER_AGENT": str(AGENT_BOUND)}
    with running_daphne(tmp_path_factory, env) as first, running_daphne(tmp_path_factory, env) as second:
        async with httpx.AsyncClient(timeout=30.0) as client:
            hog_url = endpoint(first.url, hog)
            on_session = await open_session(client, hog_url, hog)
            for batch in range(0, HOG_CALLS, 4):
                calls = [progress_call(client, hog_url, on_session, n) for n in range(batch, batch + 4)]
                for frames in await asyncio.gather(*calls):
                    # Every call is served in full, live, over its bound or not.
                    messages = [frame.message for frame in frames if frame.data]
                    assert len(messages) == PROGRESS_STEPS + 1, len(messages)
                    assert "result" in messages[-1], messages[-1]
            pinned = stored_event_bytes(own_redis.url)
            assert 0 < pinned <= AGENT_BOUND, f"{pinned} bytes of one agent's events stored"

            other_url = endpoint(second.url, other)
            other_session = await open_session(client, other_url, other)
            frames = await progress_call(client, other_url, other_session, 1)
            priming = frames[0].event_id
            assert priming is not None and priming.endswith(".0"), frames[0]
            replay_headers = {**other_session, "Accept": "text/event-stream", "Last-Event-ID": priming}
            async with client.stream("GET", other_url, headers=replay_headers) as replay:
                assert replay.status_code == 200
                replayed = [frame.message async for frame in sse_frames(replay) if frame.data]
            # Replayed from the store to the result (a fast replay may coalesce superseded progress at the edge).
            assert "result" in replayed[-1], replayed[-1:]
            assert replayed[-2]["params"]["progress"] == PROGRESS_STEPS, replayed[-2:]
