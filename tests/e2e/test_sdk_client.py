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

from mcp_app.protocol.versions import V2025_11_25, V2026_07_28
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


async def test_default_mode_negotiates_the_stateless_revision(daphne_url: str, live_access: Access) -> None:
    """The SDK's default client probes server/discover first; a dual-era server answers it."""
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, live_access, mode="auto") as client:
        assert client.protocol_version == V2026_07_28
        tools = await client.list_tools()
        result = await client.call_tool("echo", {"text": "auto"})

    assert [tool.name for tool in tools.tools] == ["echo", "add", "get_time", "progress_demo"]
    assert [(block.type, block.text) for block in result.content] == [("text", "auto")]


async def test_default_mode_falls_back_to_initialize_on_a_legacy_only_server(
    daphne_url: str, legacy_only_access: Access
) -> None:
    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, legacy_only_access, mode="auto") as client:
        assert client.protocol_version == V2025_11_25
        result = await client.call_tool("echo", {"text": "fallback"})

    assert [(block.type, block.text) for block in result.content] == [("text", "fallback")]


async def test_stateless_client_lists_and_calls_with_progress_on_a_modern_only_server(
    daphne_url: str, modern_only_access: Access
) -> None:
    updates: list[float] = []
    all_arrived = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)
        if len(updates) == 4:
            all_arrived.set()

    async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, modern_only_access, mode="auto") as client:
        assert client.protocol_version == V2026_07_28
        tools = await client.list_tools()
        added = await client.call_tool("add", {"a": 2, "b": 3})
        progressed = await client.call_tool("progress_demo", {"steps": 4}, progress_callback=on_progress)
        await all_arrived.wait()

    assert [tool.name for tool in tools.tools] == ["echo", "add", "get_time", "progress_demo"]
    assert added.structured_content == {"result": 5.0}
    assert progressed.is_error is False
    assert updates == [1.0, 2.0, 3.0, 4.0]


def _messages(error: BaseException) -> list[str]:
    if isinstance(error, BaseExceptionGroup):
        return [text for inner in error.exceptions for text in _messages(inner)]
    return [str(error)]


async def test_legacy_mode_is_refused_by_a_modern_only_server(daphne_url: str, modern_only_access: Access) -> None:
    with pytest.raises(BaseException) as refused:  # the SDK wraps the error in task groups
        async with asyncio.timeout(WAIT_SECONDS), connect(daphne_url, modern_only_access, mode="legacy"):
            pass
    assert any("speaks only 2026-07-28" in text for text in _messages(refused.value)), _messages(refused.value)
