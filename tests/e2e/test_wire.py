"""The MCP endpoint at the wire, against a real daphne process: status, headers, JSON-RPC bodies, SSE frames.

Every request goes through TCP, daphne's HTTP parser and the ASGI router exactly as a client's would. Waits
are bounded reads of the response stream, never sleeps: keep-alives arrive every 0.2 s (the ``daphne``
fixture sets ``MCP_SSE_KEEPALIVE_SECONDS``).

Not covered here: protocol rules that need no network (``tests/protocol``) and the consumer driven in-process
(``tests/transport``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from channels.db import database_sync_to_async

from mcp_app.conf import mcp_settings
from mcp_app.protocol.errors import INVALID_PARAMS, INVALID_REQUEST
from mcp_app.protocol.versions import HANDSHAKE_VERSIONS, V2024_11_05, V2025_11_25
from tests.conftest import REQUIRE_SERVICES, Access
from tests.helpers import READ_TIMEOUT_SECONDS, SseFrame, auth_headers, endpoint, post_headers, sse_frames

pytestmark = pytest.mark.e2e

ACCEPT_BOTH = "application/json, text/event-stream"
# What the SDK's mode="auto" probes with; this server speaks the handshake era only.
STATELESS_ERA_VERSION = "2026-07-28"


async def next_frame(frames: AsyncIterator[SseFrame]) -> SseFrame:
    async with asyncio.timeout(READ_TIMEOUT_SECONDS):
        return await anext(frames)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=READ_TIMEOUT_SECONDS) as client:
        yield client


async def list_tool_names(http: httpx.AsyncClient, url: str, access: Access) -> list[str]:
    response = await http.post(
        url,
        json={"jsonrpc": "2.0", "id": "list", "method": "tools/list"},
        headers=post_headers(access, **{"MCP-Protocol-Version": V2025_11_25}),
    )
    assert response.status_code == 200
    return [tool["name"] for tool in response.json()["result"]["tools"]]


async def test_initialize_without_params_answers_json_with_first_revision(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    access = live_access

    response = await http.post(
        endpoint(daphne_url, access),
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize"},
        headers=post_headers(access),
    )

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == 1
    assert body["result"]["protocolVersion"] == V2024_11_05
    assert body["result"]["capabilities"]["tools"] == {"listChanged": True}


async def test_stateless_version_header_without_envelope_is_400_invalid_params(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    access = live_access

    response = await http.post(
        endpoint(daphne_url, access),
        json={"jsonrpc": "2.0", "id": 1, "method": "server/discover"},
        headers=post_headers(
            access, **{"MCP-Protocol-Version": STATELESS_ERA_VERSION, "Mcp-Method": "server/discover"}
        ),
    )

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == INVALID_PARAMS
    assert "mcp-session-id" not in response.headers


async def test_tool_call_with_progress_token_streams_progress_then_the_response(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    access = live_access
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "progress_demo", "arguments": {"steps": 3}, "_meta": {"progressToken": "tok-7"}},
    }

    async with http.stream(
        "POST",
        endpoint(daphne_url, access),
        json=request,
        headers=post_headers(access, **{"MCP-Protocol-Version": V2025_11_25}),
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        async with asyncio.timeout(READ_TIMEOUT_SECONDS):
            frames = [frame async for frame in sse_frames(response)]

    messages = [frame.message for frame in frames]
    assert [message.get("method") for message in messages] == [*["notifications/progress"] * 3, None]
    assert [message["params"] for message in messages[:3]] == [
        {"progressToken": "tok-7", "progress": step, "total": 3, "message": f"step {step} of 3"} for step in (1, 2, 3)
    ]
    answer = messages[-1]
    assert answer["id"] == 7
    assert answer["result"].get("isError", False) is False
    assert answer["result"]["content"] == [{"type": "text", "text": "Completed 3 steps."}]


async def test_get_event_stream_is_ready_then_kept_alive(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    access = live_access

    async with http.stream(
        "GET", endpoint(daphne_url, access), headers=auth_headers(access, Accept="text/event-stream")
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        frames = sse_frames(response)
        first = await next_frame(frames)
        keepalives = [await next_frame(frames), await next_frame(frames)]

    assert first == SseFrame(comments=["ready"])
    assert keepalives == [SseFrame(comments=["keep-alive"])] * 2


async def test_get_without_event_stream_accept_answers_json_info(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    access = live_access

    response = await http.get(endpoint(daphne_url, access), headers=auth_headers(access, Accept="application/json"))

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    info = response.json()
    assert info["transport"] == "streamable-http"
    assert info["server"]["serverId"] == access.server.server_id
    assert info["protocolVersions"] == list(HANDSHAKE_VERSIONS)
    assert info["tools"] == 4


async def test_delete_answers_no_content(daphne_url: str, live_access: Access, http: httpx.AsyncClient) -> None:
    access = live_access

    response = await http.delete(endpoint(daphne_url, access), headers=auth_headers(access))

    assert response.status_code == 204
    assert response.content == b""


async def test_missing_token_is_401_with_bearer_challenge(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    access = live_access

    response = await http.post(
        endpoint(daphne_url, access),
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"Content-Type": "application/json", "Accept": ACCEPT_BOTH},
    )

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")
    body = response.json()
    assert body["id"] is None
    assert body["error"]["code"] == INVALID_REQUEST


async def test_body_over_the_limit_is_400(daphne_url: str, live_access: Access, http: httpx.AsyncClient) -> None:
    access = live_access
    limit = mcp_settings.MAX_BODY_BYTES
    assert limit == 4 * 1024 * 1024
    head, tail = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"', b'"}}'
    body = head + b"x" * (limit + 1 - len(head) - len(tail)) + tail
    assert len(body) == limit + 1

    response = await http.post(endpoint(daphne_url, access), content=body, headers=post_headers(access))

    # Refused by daphne on the declared length (mcp_app.transport.edge_limits), with seed 000's 400 and -32600.
    assert response.status_code == 400
    assert response.json()["error"]["code"] == INVALID_REQUEST


async def test_unknown_server_is_404(daphne_url: str, live_access: Access, http: httpx.AsyncClient) -> None:
    access = live_access

    response = await http.post(
        endpoint(daphne_url, access, server_id="no-such-server"),
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers=post_headers(access),
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == INVALID_REQUEST


@database_sync_to_async
def disable_binding(access: Access, tool_name: str) -> None:
    from mcp_app.models import ServerTool

    binding = ServerTool.objects.get(server=access.server, tool__name=tool_name)
    binding.enabled = False
    binding.save()


async def test_catalog_edit_is_seen_by_the_next_tools_list(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    access = live_access
    url = endpoint(daphne_url, access)
    assert await list_tool_names(http, url, access) == ["echo", "add", "get_time", "progress_demo"]

    await disable_binding(access, "get_time")

    # daphne has cached the server: the edit reaches it within the invalidation bound (1 s), not by a poll of ours.
    deadline = time.monotonic() + 1.0
    while (names := await list_tool_names(http, url, access)) != ["echo", "add", "progress_demo"]:
        assert time.monotonic() < deadline, names
        await asyncio.sleep(0.01)


@pytest.mark.services
async def test_catalog_edit_reaches_open_streams_as_tools_list_changed(
    daphne_url: str, live_access: Access, http: httpx.AsyncClient
) -> None:
    from django.conf import settings

    if not settings.REDIS_URL:
        # The in-memory layer lives in one process: daphne could never hear this test process publish.
        reason = "tools/list_changed across processes needs a shared channel layer (set REDIS_URL)"
        if REQUIRE_SERVICES:
            pytest.fail(f"MCP_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)
    access = live_access
    url = endpoint(daphne_url, access)
    assert await list_tool_names(http, url, access) == ["echo", "add", "get_time", "progress_demo"]

    async with http.stream("GET", url, headers=auth_headers(access, Accept="text/event-stream")) as response:
        assert response.status_code == 200
        frames = sse_frames(response)
        assert (await next_frame(frames)).comments == ["ready"]
        # The stream joins the server's group after ``: ready``; the first keep-alive proves it has joined.
        assert (await next_frame(frames)).comments == ["keep-alive"]

        await disable_binding(access, "get_time")

        announced: SseFrame | None = None
        async with asyncio.timeout(READ_TIMEOUT_SECONDS):
            async for frame in frames:
                if frame.data is not None:  # keep-alives may come first
                    announced = frame
                    break
        assert announced is not None, "the stream ended without a data frame"
        assert announced.message == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}

    assert await list_tool_names(http, url, access) == ["echo", "add", "progress_demo"]
