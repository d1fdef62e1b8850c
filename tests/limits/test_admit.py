"""``limits.admit``: the one question the edge asks of every limit, answered directly (issue 26).

Each limit refuses with its JSON-RPC error, HTTP status and ``Retry-After``; an admitted request gets ``None``.
The buckets and leases are the configured backends (Redis on PostgreSQL + Redis, the process's own on the
embedded default), keyed by fresh pks so that no other test's state counts.
"""

from __future__ import annotations

import secrets
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_app.limits.admit import Caller, admit
from mcp_app.protocol.errors import CAPACITY_EXCEEDED, RATE_LIMITED, CapacityExceeded, RateLimited


def caller(**token: Any) -> Caller:
    pk = secrets.randbelow(10**9) + 10**9
    snapshot = SimpleNamespace(
        tenant_pk=pk, agent_pk=pk, tenant_rate=(None, None), agent_rate=(None, None), budgets=(), **token
    )
    return Caller(f"192.0.2.{pk % 250}", None, snapshot)


def tool(ref: int, rate: float) -> Any:
    return SimpleNamespace(ref=ref, rate_limit=(rate, 1))


async def test_an_agent_over_its_rate_is_refused_429_with_retry_after_and_under_it_admitted(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "RATE_LIMIT_PER_AGENT": 1.0, "RATE_BURST_PER_AGENT": 2}
    who = caller()
    assert await admit(who, requests=2) is None
    refused = await admit(who, requests=1)
    assert refused is not None and isinstance(refused.error, RateLimited)
    assert (refused.status, refused.error.code, refused.error.scope) == (429, RATE_LIMITED, "agent")
    assert refused.retry_after == refused.error.retry_after_seconds >= 1


async def test_a_tool_over_its_own_rate_is_refused_while_the_agent_is_not(settings: Any) -> None:
    ref = secrets.randbelow(10**9) + 10**9
    who = caller()
    assert await admit(who, requests=1, tools=[tool(ref, 0.5)]) is None
    refused = await admit(who, requests=1, tools=[tool(ref, 0.5)])
    assert refused is not None and (refused.status, refused.error.scope) == (429, "tool")
    assert await admit(who, requests=1) is None


async def test_a_stream_over_its_agents_cap_is_refused_until_the_held_slot_is_released(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "STREAMS_PER_AGENT": 1}
    who = caller()
    held: list[Any] = []
    assert await admit(who, stream=held) is None and len(held) == 1
    second: list[Any] = []
    refused = await admit(who, stream=second)
    assert refused is not None and isinstance(refused.error, CapacityExceeded) and second == []
    assert (refused.status, refused.retry_after, refused.error.code) == (429, 5, CAPACITY_EXCEEDED)
    assert refused.error.scope == "agent"
    await held.pop().release()
    again: list[Any] = []
    assert await admit(who, stream=again) is None
    await again.pop().release()


async def test_a_process_short_of_descriptors_refuses_a_stream_503(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_app.limits import caps

    monkeypatch.setattr(caps, "descriptors_short", lambda: True)
    held: list[Any] = []
    refused = await admit(caller(), stream=held)
    assert refused is not None and (refused.status, refused.retry_after, refused.error.scope) == (503, 1, "process")
    assert held == []


@pytest.mark.django_db(transaction=True)
async def test_a_new_session_over_the_agents_cap_is_refused_and_under_it_admitted(
    settings: Any, access_factory: Any
) -> None:
    from channels.db import database_sync_to_async

    from mcp_app.models import McpSession

    settings.MCP_APP = {**settings.MCP_APP, "SESSIONS_PER_AGENT": 1}
    access = await database_sync_to_async(access_factory)()
    who = Caller("192.0.2.1", None, SimpleNamespace(tenant_pk=access.tenant.pk, agent_pk=access.agent.pk))
    assert await admit(who, session=True) is None
    await database_sync_to_async(McpSession.objects.open_session)(
        server_id=access.server.pk, agent_id=access.agent.pk, protocol_version="2025-11-25"
    )
    refused = await admit(who, session=True)
    assert refused is not None and isinstance(refused.error, CapacityExceeded)
    assert (refused.status, refused.retry_after, refused.error.scope) == (429, 5, "agent")


async def test_failed_authentications_block_the_address_then_the_block_refuses_before_any_lookup(
    settings: Any,
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "AUTH_FAILURE_BURST": 2, "AUTH_FAILURE_RATE": 0.1}
    anonymous = Caller(f"198.51.100.{secrets.randbelow(250)}-{secrets.token_hex(4)}", None)
    assert await admit(anonymous) is None
    assert await admit(anonymous, failed=True) is None
    assert await admit(anonymous, failed=True) is None
    refused = await admit(anonymous, failed=True)
    assert refused is not None and (refused.status, refused.error.scope) == (429, "address")
    blocked = await admit(anonymous)
    assert blocked is not None and (blocked.status, blocked.error.code) == (429, RATE_LIMITED)
    assert blocked.retry_after >= 1
