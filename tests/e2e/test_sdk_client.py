"""The official MCP Python SDK as a real client of a daphne-served server.

What a third-party client negotiates and sees: the handshake (``mode="legacy"``), the ``server/discover``
probe falling back to ``initialize`` (``mode="auto"``), tools/list order, tool results and progress
callbacks. The SDK talks through ``httpx2``; the bearer token rides on the HTTP client, the agent id in the
URL.

Not covered here: exact status codes and frames (``test_wire.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest
from mcp.client.client import Client, ConnectMode
from mcp.client.streamable_http import streamable_http_client

from mcp_app.protocol.versions import V2025_11_25
from tests.conftest import Access

pytestmark = pytest.mark.e2e

WAIT_SECONDS = 10.0


@asynccontextmanager
async def connect(daphne_url: str, access: Access, *, mode: ConnectMode) -> AsyncIterator[Client]:
    """A connected SDK client; the HTTP client is ours to close (the SDK leaves a provided one open)."""
    url = f"{daphne_url}{access.path}?{access.query}"
    headers = {"Authorization": f"Bearer {access.raw_token}"}
    async with httpx2.AsyncClient(headers=headers) as http_client:
        transport = streamable_http_client(url, http_client=http_client)
        async with Client(transport, mode=mode, read_timeout_seconds=WAIT_SECONDS) as client:
            yield client


async def test_legacy_handshake_negotiates_the_latest_version(daphne_url: str, live_access: Access) -> None:
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, live_access, mode="legacy") as client:
        assert client.protocol_version == V2025_11_25
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True


async def test_list_tools_returns_the_bound_tools_in_order(daphne_url: str, live_access: Access) -> None:
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, live_access, mode="legacy") as client:
        result = await client.list_tools()

    assert [tool.name for tool in result.tools] == ["echo", "add", "get_time", "progress_demo"]


async def test_echo_returns_the_text(daphne_url: str, live_access: Access) -> None:
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, live_access, mode="legacy") as client:
        result = await client.call_tool("echo", {"text": "hello over daphne"})

    assert result.is_error is False
    assert [(block.type, block.text) for block in result.content] == [("text", "hello over daphne")]


async def test_add_returns_structured_content(daphne_url: str, live_access: Access) -> None:
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, live_access, mode="legacy") as client:
        result = await client.call_tool("add", {"a": 2, "b": 3})

    assert result.is_error is False
    assert result.structured_content == {"result": 5.0}


async def test_progress_demo_delivers_one_callback_per_step(daphne_url: str, live_access: Access) -> None:
    updates: list[tuple[float, float | None, str | None]] = []
    all_arrived = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))
        if len(updates) == 3:
            all_arrived.set()

    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, live_access, mode="legacy") as client:
        result = await client.call_tool("progress_demo", {"steps": 3}, progress_callback=on_progress)
        # The SDK runs progress callbacks as tasks of their own: they may finish after the result arrives.
        await all_arrived.wait()

    assert result.is_error is False
    assert updates == [(float(step), 3.0, f"step {step} of 3") for step in (1, 2, 3)]


async def test_auto_mode_falls_back_to_initialize(daphne_url: str, live_access: Access) -> None:
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, live_access, mode="auto") as client:
        assert client.protocol_version == V2025_11_25
        result = await client.call_tool("echo", {"text": "auto"})

    assert [(block.type, block.text) for block in result.content] == [("text", "auto")]
