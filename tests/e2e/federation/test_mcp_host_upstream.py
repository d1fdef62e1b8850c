"""mcp-host itself as an upstream: tenant B federates tenant A's handshake-era server through a real daphne.

What a customer's agent sees when its tenant brings in an existing MCP server that speaks only the handshake
era: the prefixed entries, calls from both client eras, progress and logs relayed, an elicitation relayed to a
handshake-era client in-band and to a stateless client as ``input_required`` (the upstream's call waiting for
the retry), a cancellation that stops the upstream tool, the upstream's errors passed through, the audit row
naming the upstream, and another tenant that can neither see nor call any of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Access
from tests.e2e.conftest import Daphne
from tests.e2e.federation.conftest import WAIT_SECONDS, answering, bearer, sdk, upstream_url
from tests.helpers import wait_until

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"


@pytest.fixture
def federated(
    federating_daphne: Daphne,
    mcp_host_upstream: Access,
    access_factory: Callable[..., Access],
    federate: Callable[..., Any],
) -> Access:
    """Tenant B's server exposing tenant A's server as an upstream, prefix ``up_``."""
    access = access_factory(tools=())
    federate(access, upstream_url(federating_daphne, mcp_host_upstream), secret=bearer(mcp_host_upstream))
    return access


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_the_prefixed_entries_are_listed_and_called(
    federating_daphne: Daphne, federated: Access, mode: str
) -> None:
    async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, federated, mode=mode) as client:
        listed = await client.list_tools()
        result = await client.call_tool("up_echo", {"text": "through two hops"})

    assert sorted(tool.name for tool in listed.tools) == [
        "up_ask_name",
        "up_boom",
        "up_chatty",
        "up_echo",
        "up_worker_job",
    ]
    assert result.is_error is False
    assert [block.text for block in result.content if block.type == "text"] == ["through two hops"]


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_progress_is_relayed_with_the_clients_own_token(
    federating_daphne: Daphne, federated: Access, mode: str, tmp_path: Path
) -> None:
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, federated, mode=mode) as client:
        result = await client.call_tool(
            "up_worker_job",
            {"path": str(tmp_path / "trace"), "tag": "p", "steps": 3},
            progress_callback=on_progress,
        )

    assert result.is_error is False
    assert updates == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_cancelled_call_stops_the_upstream_tool(
    federating_daphne: Daphne, federated: Access, mode: str, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    arguments = {"path": str(trace), "tag": "c", "steps": 200, "interval_ms": 50}

    def lines() -> list[str]:
        return trace.read_text().splitlines() if trace.exists() else []

    async with sdk(federating_daphne.url, federated, mode=mode) as client:
        call = asyncio.ensure_future(client.call_tool("up_worker_job", arguments))
        await wait_until(lambda: "c step 1" in lines(), timeout=WAIT_SECONDS, what="the upstream tool's first step")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_until(lambda: "c stopped" in lines(), timeout=WAIT_SECONDS, what="the upstream tool to stop")

    assert "c finished" not in lines()
    assert sum(line.startswith("c step") for line in lines()) < 200


async def test_an_elicitation_reaches_a_handshake_era_client_and_its_answer_the_upstream_tool(
    federating_daphne: Daphne, federated: Access
) -> None:
    asked, answer = answering(name="Ada")

    async with (
        asyncio.timeout(WAIT_SECONDS),
        sdk(federating_daphne.url, federated, mode="legacy", elicitation_callback=answer) as client,
    ):
        result = await client.call_tool("up_ask_name", {})

    assert asked == ["What is your name?"]
    assert [block.text for block in result.content if block.type == "text"] == ["Hello, Ada!"]


async def test_an_elicitation_reaches_a_stateless_client_as_input_required(
    federating_daphne: Daphne, federated: Access
) -> None:
    asked, answer = answering(name="Grace")

    async with (
        asyncio.timeout(WAIT_SECONDS),
        sdk(federating_daphne.url, federated, mode=MODERN, elicitation_callback=answer) as client,
    ):
        first = await client.session.call_tool("up_ask_name", {}, allow_input_required=True)
        result = await client.call_tool("up_ask_name", {})

    assert isinstance(first, types.InputRequiredResult)
    assert [request.method for request in (first.input_requests or {}).values()] == ["elicitation/create"]
    assert asked == ["What is your name?"]
    assert [block.text for block in result.content if block.type == "text"] == ["Hello, Grace!"]


async def test_a_client_without_the_capability_gets_the_elicitation_declined_upstream(
    federating_daphne: Daphne, federated: Access
) -> None:
    async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, federated, mode="legacy") as client:
        result = await client.call_tool("up_ask_name", {})

    assert result.is_error is False
    assert [block.text for block in result.content if block.type == "text"] == ["no name (decline)"]


async def test_the_upstreams_tool_errors_pass_through_and_the_audit_names_the_upstream(
    federating_daphne: Daphne, federated: Access
) -> None:
    from asgiref.sync import sync_to_async

    from mcp_app.models import ToolCall

    async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, federated, mode="legacy") as client:
        failed = await client.call_tool("up_boom", {})
        await client.call_tool("up_echo", {"text": "audited"})

    assert failed.is_error is True

    def audited() -> list[tuple[str, str, str]]:
        rows = ToolCall.objects.filter(tenant=federated.tenant).order_by("started_at")
        return [(row.tool_name, row.status, row.upstream) for row in rows if row.upstream_ms is not None]

    def both() -> list[tuple[str, str, str]] | None:
        found = audited()
        return found if len(found) == 2 else None

    rows = await wait_until(sync_to_async(both), timeout=WAIT_SECONDS, what="two audit rows")
    assert rows == [("up_boom", "tool_error", "upstream"), ("up_echo", "ok", "upstream")]


async def test_another_tenant_neither_sees_nor_calls_the_upstream(
    federating_daphne: Daphne, federated: Access, access_factory: Callable[..., Access]
) -> None:
    from asgiref.sync import sync_to_async

    stranger = await sync_to_async(access_factory)(tools=("echo",))

    async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, stranger, mode="legacy") as client:
        listed = await client.list_tools()
        with pytest.raises(MCPError) as refused:
            await client.call_tool("up_echo", {"text": "not mine"})

    assert [tool.name for tool in listed.tools] == ["echo"]
    assert (refused.value.code, refused.value.message) == (-32602, "Unknown tool: up_echo")


async def test_warm_calls_share_one_upstream_session(
    federating_daphne: Daphne, federated: Access, mcp_host_upstream: Access
) -> None:
    """The pool keeps one connection per upstream: the upstream sees one handshake, whatever the number of calls
    and clients (sessions are opened only by ``initialize``; the registration's sync had its own)."""
    from asgiref.sync import sync_to_async

    from mcp_app.models import McpSession

    count = sync_to_async(McpSession.objects.filter(server=mcp_host_upstream.server).count)
    before = await count()
    for mode in ("legacy", MODERN):
        async with asyncio.timeout(WAIT_SECONDS), sdk(federating_daphne.url, federated, mode=mode) as client:
            await asyncio.gather(*(client.call_tool("up_echo", {"text": str(n)}) for n in range(5)))

    assert await count() - before == 1
