"""Redis goes down under a running daphne, and comes back: fast 503s, streams that end, no failed request after.

The test runs its own ``redis-server`` on a free port (never the shared one), points a daphne process at it, and
stops and restarts it. While it is down:

- requests that need the channel layer or the event store (a GET stream, ``subscriptions/listen``, a session
  call with progress) get a 503 with a JSON-RPC error body within ``FAST_SECONDS``, carrying the request's id;
- a GET stream that was open ends with an ``event: error`` instead of going quiet;
- a plain JSON call, which needs neither, is still served.

Once it is back, the first request of each kind succeeds. Needs ``redis-server`` on the PATH (skips without it,
fails under ``MCP_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import Access
from tests.e2e.conftest import (
    KEEPALIVE_SECONDS,
    OwnRedis,
    daphne_command,
    database_url,
    free_port,
    wait_for_port,
)
from tests.helpers import data_messages, endpoint, initialize, modern_body, routing_headers
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

FAST_SECONDS = 3.0
WAIT = 10.0


@pytest.fixture
def outage(transactional_db: None, tmp_path: Path) -> Iterator[tuple[OwnRedis, str]]:
    from django.conf import settings
    from django.db import connection

    redis = OwnRedis(tmp_path)
    redis.start()
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("MCP_SQLITE_PATH", "MCP_TEST_SQLITE_PATH")},
        "DJANGO_SETTINGS_MODULE": "mcp_host.settings",
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": redis.url,
        "MCP_SSE_KEEPALIVE_SECONDS": KEEPALIVE_SECONDS,
        "PYTHONUNBUFFERED": "1",
    }
    stderr = (tmp_path / "daphne.log").open("wb")
    daphne = subprocess.Popen(daphne_command(port), cwd=settings.BASE_DIR, env=env, stdout=stderr, stderr=stderr)
    try:
        wait_for_port(port, daphne, "daphne")
        yield redis, f"http://127.0.0.1:{port}"
    finally:
        daphne.terminate()
        try:
            daphne.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            daphne.kill()
        redis.stop()
        stderr.close()


LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def _broadcast_to_server(redis_url: str, server_pk: int, message: dict[str, Any]) -> None:
    """A notification to a server's streams through the test's own Redis, as ``events.publish_to_servers`` sends
    one (the daphne's channel prefix)."""
    from mcp_app.channel_layer import redis_layer_config
    from mcp_app.events import Broadcast, server_group
    from mcp_app.redis_layer import RedisChannelLayer

    config = redis_layer_config(redis_url, prefix=os.environ.get("MCP_CHANNEL_PREFIX", "mcp"))["CONFIG"]
    layer = RedisChannelLayer(**config)
    try:
        group = server_group(server_pk)
        await layer.group_send(group, Broadcast(message, group).to_wire())
    finally:
        await layer.close_pools()


def _modern_listen() -> tuple[dict[str, Any], dict[str, str]]:
    body = modern_body("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id="listen-1")
    return body, routing_headers(body)


async def _timed(request: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await request
    return response, time.monotonic() - started


async def test_redis_down_gives_fast_503s_ends_streams_and_service_resumes(
    outage: tuple[OwnRedis, str], live_access: Access
) -> None:
    redis, base = outage
    url = endpoint(base, live_access)
    progress_call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "progress_demo", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}},
    }
    plain_call = {
        "jsonrpc": "2.0",
        "id": 8,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}},
    }
    listen, listen_headers = _modern_listen()
    async with httpx.AsyncClient(timeout=WAIT) as http:
        opened = await http.post(url, json=initialize({}), headers=headers(live_access))
        on_session = headers(
            live_access, **{"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        )
        stream_headers = headers(live_access, Accept="text/event-stream")
        async with http.stream("GET", url, headers=stream_headers) as stream:
            lines = stream.aiter_lines()
            async with asyncio.timeout(WAIT):
                while (await anext(lines)) != ": ready":
                    pass
            redis.stop()
            async with asyncio.timeout(WAIT):
                rest = [line async for line in lines]
        assert "event: error" in rest, rest[-5:]

        down = {
            "GET stream": await _timed(http.get(url, headers=stream_headers)),
            "progress call": await _timed(http.post(url, json=progress_call, headers=on_session)),
            "listen": await _timed(http.post(url, json=listen, headers={**headers(live_access), **listen_headers})),
        }
        plain = await http.post(url, json=plain_call, headers=on_session)

        redis.start()
        async with http.stream("GET", url, headers=stream_headers) as stream:
            first_get = stream.status_code
            lines = stream.aiter_lines()
            async with asyncio.timeout(WAIT):
                while (await anext(lines)) != ": ready":
                    pass
                # The process's fan-out of idle streams subscribed again: a notification reaches the new stream.
                await _broadcast_to_server(redis.url, live_access.server.pk, LIST_CHANGED)
                heard = await anext(data_messages(lines))
        first_call = await http.post(url, json=progress_call, headers=on_session)

    for what, (response, seconds) in down.items():
        assert response.status_code == 503, (what, response.status_code, response.text[:300])
        assert seconds < FAST_SECONDS, (what, seconds)
        error = response.json()
        assert error["jsonrpc"] == "2.0" and error["error"]["code"] == -32603, what
        assert "unavailable" in error["error"]["message"].lower(), what
    # The requests' ids were readable: their 503s answer them.
    assert down["GET stream"][0].json()["id"] is None
    assert down["progress call"][0].json()["id"] == 7
    assert down["listen"][0].json()["id"] == "listen-1"
    assert plain.status_code == 200 and plain.json()["result"]["content"] == [{"type": "text", "text": "x"}]
    assert first_get == 200
    assert heard == LIST_CHANGED
    assert first_call.status_code == 200
    messages = [
        orjson.loads(line[6:])
        for line in first_call.text.splitlines()
        if line.startswith("data: ") and line[6:].strip()
    ]
    assert messages[-1]["id"] == 7 and "result" in messages[-1]
