"""The request-path budget at the wire: a warm ``tools/call`` runs no SQL and no thread hop (a sync tool: one hop,
to run it), in both eras, stateless and on a session. Counted across every thread and connection (see
``tests.request_path``), through the real router and consumer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.helpers import call, open_session, tool_call
from tests.request_path import caches_ready, counting

LEGACY = "2025-11-25"
MODERN = "2026-07-28"


@pytest.fixture
def writer_idle(settings: Any) -> None:
    """The off-path writer keeps to its own schedule; nothing it could flush is pending while we count."""
    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_INTERVAL_SECONDS": 3600}


@pytest.mark.parametrize("mode", ["stateless", "session", "modern"])
@pytest.mark.parametrize(("tool", "hops"), [("async_echo", []), ("echo", []), ("sync_echo", ["_in_worker_thread"])])
async def test_a_warm_tool_call_runs_no_query_and_hops_only_to_run_a_sync_tool(
    mode: str,
    tool: str,
    hops: list[str],
    writer_idle: None,
    make_access: Callable[..., Awaitable[Any]],
    orm: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inline tools only: a worker call (``execution="worker"``) writes its durable record before dispatch, by
    design (docs/workers.md), so it is outside this budget."""
    from mcp_app.caching import writebehind

    access = await make_access(tools=("echo", "async_echo", "sync_echo"))
    await caches_ready()
    extra: dict[str, str] = {}
    if mode == "session":
        extra["mcp-session-id"] = await open_session(access, initialized=True)
    body, headers = tool_call(mode, tool, "warm")
    with counting(monkeypatch) as cost:
        cold = await call(access, body, headers={**headers, **extra})
        assert cold.status == 200, cold.body
        if mode != "session":  # initialize already filled the caches of a session's first call
            assert cost.queries, "the first request of a process loads what it calls with"
            assert cost.hops[0] == "_admit", cost.hops
        await orm(writebehind.flush)  # its last-used stamp is written now, not during the counted request
        cost.reset()
        warm = await call(access, body, headers={**headers, **extra})
        assert (cost.queries, cost.hops) == ([], hops)
    assert warm.status == 200
    assert warm.json()["result"]["content"] == [{"type": "text", "text": "warm"}]


async def test_a_warm_request_still_records_use_off_the_path(
    make_access: Callable[..., Awaitable[Any]], orm: Any, writer_idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_app.caching import writebehind
    from mcp_app.models import AgentToken

    access = await make_access(tools=("async_echo",))
    await caches_ready()
    session_id = await open_session(access, initialized=True)
    body, headers = tool_call("session", "async_echo", "x")
    await call(access, body, headers={**headers, "mcp-session-id": session_id})
    with counting(monkeypatch) as cost:
        assert (await call(access, body, headers={**headers, "mcp-session-id": session_id})).status == 200
    assert cost.queries == []
    assert writebehind.pending() >= 1  # queued in memory, not written on the path
    assert await orm(writebehind.flush) >= 1
    token = await orm(AgentToken.objects.get, pk=access.token.pk)
    assert token.last_used_at is not None


async def test_a_cors_preflight_reads_the_server_cache_and_is_free_when_warm(
    make_access: Callable[..., Awaitable[Any]], orm: Any, writer_idle: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OPTIONS from a browser: the server's allowed origins come from the per-process server snapshot, loaded in
    one worker-thread call the first time and then with no query and no hop (issue 8: no database hop)."""
    from mcp_app.caching import identity
    from mcp_app.models import McpServer

    app = "https://app.example"
    access = await make_access(tools=("async_echo",))
    await orm(McpServer.objects.filter(pk=access.server.pk).update, allowed_origins=[app])
    identity.clear()  # the update above does not publish; start from an empty cache
    await caches_ready()
    preflight = {"origin": app, "access-control-request-method": "POST"}
    with counting(monkeypatch) as cost:
        cold = await call(access, method="OPTIONS", headers=preflight, drop=("authorization",))
        assert cold.status == 204, cold.body
        assert cost.hops == ["server"], cost.hops  # identity.server(load=True), once
        assert cost.queries
        cost.reset()
        warm = await call(access, method="OPTIONS", headers=preflight, drop=("authorization",))
        assert (cost.queries, cost.hops) == ([], [])
    assert warm.status == 204
    assert warm.headers["access-control-allow-origin"] == app
