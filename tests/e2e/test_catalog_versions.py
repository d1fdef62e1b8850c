"""Catalog versions across two real daphne processes: both have served (and cached) a server's published version;
a rollback made by a third process (this test, as the admin or ``manage.py mcp_versions`` would) is what both serve
within a second, and a stream held by the other process hears ``tools/list_changed`` for it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from channels.db import database_sync_to_async

from tests.conftest import Access
from tests.helpers import data_messages, endpoint, initialize, needs_shared_layer, within_bound
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

ANSWER = {"content": [{"type": "text", "text": "sunny"}]}
WAIT = 10.0


@pytest.fixture
def reviewed_access(transactional_db: None, access_factory: Callable[..., Access], tool_factory: Any) -> Access:
    """A server that reviews edits; version 2 describes ``weather`` as "First.", version 3 as "Second."."""
    from mcp_app.catalog import versions
    from mcp_app.models import McpServer, Tool

    access = access_factory(tools=(), review_edits=True)
    tool = tool_factory(access.server, "weather", kind=Tool.Kind.STATIC, static_result=ANSWER, description="First.")
    versions.publish(McpServer.objects.get(pk=access.server.pk))
    tool.description = "Second."
    tool.save()
    versions.publish(McpServer.objects.get(pk=access.server.pk))
    return access


def rollback_to_2(access: Access) -> None:
    from mcp_app.catalog import versions
    from mcp_app.models import McpServer

    assert versions.rollback(McpServer.objects.get(pk=access.server.pk), 2).number == 4


async def described(http: httpx.AsyncClient, base: str, access: Access, on_session: dict[str, str]) -> str:
    listed = await http.post(
        endpoint(base, access), json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=on_session
    )
    assert listed.status_code == 200, listed.text
    (tool,) = listed.json()["result"]["tools"]
    return str(tool["description"])


async def open_on(http: httpx.AsyncClient, base: str, access: Access) -> dict[str, str]:
    opened = await http.post(endpoint(base, access), json=initialize({}), headers=headers(access))
    assert opened.status_code == 200, opened.text
    return headers(access, **{"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"})


async def test_a_rollback_is_served_by_every_process_within_a_second(
    daphne_url: str, second_daphne: Any, reviewed_access: Access, shared_log: None
) -> None:
    bases = (daphne_url, second_daphne.url)
    async with httpx.AsyncClient(timeout=5.0) as http:
        on_session = await open_on(http, daphne_url, reviewed_access)
        for base in bases:  # each process caches the server and its published catalog
            for _ in range(2):
                assert await described(http, base, reviewed_access, on_session) == "Second."
        await database_sync_to_async(rollback_to_2)(reviewed_access)

        async def seen(base: str) -> bool:
            return await described(http, base, reviewed_access, on_session) == "First."

        await within_bound(seen, bases, what="rollback to version 2", bound=1.0)


async def test_a_stream_on_the_other_process_hears_the_rollback(
    daphne_url: str, second_daphne: Any, reviewed_access: Access, shared_log: None
) -> None:
    needs_shared_layer()
    async with httpx.AsyncClient(timeout=WAIT) as http, httpx.AsyncClient(timeout=WAIT) as client:
        on_session = await open_on(http, daphne_url, reviewed_access)
        stream_headers = {**on_session, "Accept": "text/event-stream"}
        async with client.stream("GET", endpoint(second_daphne.url, reviewed_access), headers=stream_headers) as stream:
            lines = stream.aiter_lines()
            async with asyncio.timeout(WAIT):
                while (await anext(lines)) != ": ready":
                    pass
                await database_sync_to_async(rollback_to_2)(reviewed_access)
                message = await anext(data_messages(lines))
    assert message == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
