"""Redis connections of a daphne stay bounded, and idle ones close (issue 25 #1).

Two daphnes share a private ``redis-server`` whose ``maxclients`` is low. One agent opens many GET streams on the
first daphne and ends them all at once; at 7eabff9 each ended stream left about two idle Redis connections open
in that daphne for good, so Redis was soon full and another tenant's GET streams on the *other* daphne failed
after the attacker had left. Counted from Redis's ``INFO clients``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Access
from tests.helpers import endpoint, wait_until

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
