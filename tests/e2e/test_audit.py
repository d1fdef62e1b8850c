"""The audit log in a real daphne process: its flusher thread writes each call to the shared database within
the flush interval (the loss bound of a crash), and a clean shutdown (SIGTERM) writes what is still buffered."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async

from mcp_app.conf import mcp_settings
from mcp_app.models import ToolCall
from tests.conftest import Access
from tests.helpers import endpoint, post_headers

from .conftest import running_daphne

pytestmark = pytest.mark.e2e

VERSION = "2025-11-25"


async def call_echo(client: httpx.AsyncClient, url: str, access: Access, text: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": text,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }
    reply = await client.post(
        endpoint(url, access), json=body, headers=post_headers(access, **{"MCP-Protocol-Version": VERSION})
    )
    assert reply.status_code == 200
    assert reply.json()["result"]["content"][0]["text"] == text


def request_ids() -> set[str]:
    return set(ToolCall.objects.values_list("request_id", flat=True))


async def wait_for_rows(expected: set[str], timeout: float) -> float | None:
    """Seconds until every expected row is in the database, or ``None`` after ``timeout`` (bounded polling of a
    database another process writes: there is nothing in this process to wait on)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if expected <= await database_sync_to_async(request_ids)():
            return time.monotonic() - start
        await asyncio.sleep(0.05)
    return None


async def test_daphne_writes_each_call_within_the_flush_interval(daphne_url: str, live_access: Access) -> None:
    interval = float(mcp_settings.AUDIT_FLUSH_INTERVAL_SECONDS)
    async with httpx.AsyncClient(timeout=10) as client:
        await call_echo(client, daphne_url, live_access, "first")
        waited = await wait_for_rows({"first"}, timeout=interval + 5)
    assert waited is not None, "the call was never written"
    # The row waited at most one interval in daphne's memory (plus the INSERT and this poll's granularity).
    assert waited <= interval + 0.75, waited
    row = await database_sync_to_async(ToolCall.objects.get)(request_id="first")
    assert (row.tool_name, row.status, row.agent_key, row.arguments) == (
        "echo",
        "ok",
        live_access.agent.agent_id,
        {"text": "first"},
    )


async def test_a_clean_shutdown_writes_what_is_buffered(live_access: Access, tmp_path_factory: Any) -> None:
    names = {f"shutdown-{index}" for index in range(3)}
    with running_daphne(tmp_path_factory) as server:
        async with httpx.AsyncClient(timeout=10) as client:
            for name in sorted(names):
                await call_echo(client, server.url, live_access, name)
        # Leaving the block sends SIGTERM and waits for daphne to exit.
    assert server.process.returncode is not None
    assert names <= await database_sync_to_async(request_ids)()
