"""Every change takes effect at once within the process, at the wire, although the request path is cached:
revoking or expiring a token, deactivating an agent or tenant, disabling a server, editing a catalog or a
token's scope, terminating a session, a session idling out. Each test first shows the request served warm
(no query), so that it is the invalidation, not a cold cache, that makes the change visible.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from mcp_app.models import Agent, AgentToken, McpServer, McpSession, ServerTool, Tenant
from tests.helpers import call, open_session, rpc
from tests.request_path import caches_ready, counting

LEGACY = "2025-11-25"
ECHO = rpc("tools/call", {"name": "async_echo", "arguments": {"text": "hi"}})


def edit(model: Any, pk: int, **fields: Any) -> None:
    """Change a row the way the admin does: load, set, save."""
    row = model.objects.get(pk=pk)
    for name, value in fields.items():
        setattr(row, name, value)
    row.save()


@pytest.fixture
async def warm(make_access: Callable[..., Awaitable[Any]], monkeypatch: pytest.MonkeyPatch) -> Any:
    """An access whose token, server and catalog this process has cached (asserted: the last call ran no SQL)."""
    access = await make_access(tools=("async_echo",))
    await caches_ready()
    assert (await call(access, ECHO)).status == 200
    with counting(monkeypatch) as cost:
        reply = await call(access, ECHO)
    assert reply.status == 200
    assert cost.queries == []
    return access


async def test_a_revoked_token_is_refused_at_once(warm: Any, orm: Any) -> None:
    await orm(lambda: AgentToken.objects.get(pk=warm.token.pk).revoke())
    reply = await call(warm, ECHO)
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]


async def test_tokens_revoked_in_bulk_are_refused_at_once(warm: Any, orm: Any) -> None:
    assert await orm(lambda: AgentToken.objects.filter(pk=warm.token.pk).revoke()) == 1
    assert (await call(warm, ECHO)).status == 401


async def test_a_token_whose_expiry_is_moved_into_the_past_is_refused(warm: Any, orm: Any) -> None:
    def expire() -> None:
        token = AgentToken.objects.get(pk=warm.token.pk)
        token.expires_at = timezone.now() - timedelta(seconds=1)
        token.save()

    await orm(expire)
    assert (await call(warm, ECHO)).status == 401


async def test_a_token_expiring_by_time_is_refused_from_the_cache_without_a_query(
    make_access: Callable[..., Awaitable[Any]], orm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    access = await make_access(tools=("async_echo",))
    expires = timezone.now() + timedelta(hours=1)
    await orm(AgentToken.objects.filter(pk=access.token.pk).update, expires_at=expires)  # before any caching
    await caches_ready()
    assert (await call(access, ECHO)).status == 200
    assert (await call(access, ECHO)).status == 200
    monkeypatch.setattr(timezone, "now", lambda: expires + timedelta(seconds=1))
    with counting(monkeypatch) as cost:
        reply = await call(access, ECHO)
    assert reply.status == 401
    assert (cost.queries, cost.hops) == ([], [])


async def test_a_deactivated_agent_is_refused_at_once(warm: Any, orm: Any) -> None:
    await orm(edit, Agent, warm.agent.pk, is_active=False)
    assert (await call(warm, ECHO)).status == 401


async def test_a_deactivated_tenant_hides_its_servers_at_once(warm: Any, orm: Any) -> None:
    await orm(edit, Tenant, warm.tenant.pk, is_active=False)
    assert (await call(warm, ECHO)).status == 404


async def test_a_disabled_server_is_404_at_once(warm: Any, orm: Any) -> None:
    await orm(edit, McpServer, warm.server.pk, enabled=False)
    assert (await call(warm, ECHO)).status == 404


async def test_a_server_removed_from_the_token_scope_is_403_at_once(warm: Any, orm: Any) -> None:
    await orm(lambda: AgentToken.objects.get(pk=warm.token.pk).servers.remove(warm.server))
    reply = await call(warm, ECHO)
    assert reply.status == 403
    assert 'error="insufficient_scope"' in reply.headers["www-authenticate"]


async def test_a_token_removed_from_the_server_side_of_the_scope_is_403_at_once(warm: Any, orm: Any) -> None:
    await orm(lambda: McpServer.objects.get(pk=warm.server.pk).tokens.remove(warm.token))
    assert (await call(warm, ECHO)).status == 403


async def test_a_catalog_edit_changes_what_the_next_call_sees(warm: Any, orm: Any) -> None:
    binding = await orm(ServerTool.objects.get, server=warm.server, tool__name="async_echo")
    await orm(edit, ServerTool, binding.pk, enabled=False)
    listed = await call(warm, rpc("tools/list"))
    assert listed.json()["result"]["tools"] == []
    called = await call(warm, ECHO)
    assert called.json()["error"]["code"] == -32602


async def test_a_terminated_session_is_404_at_once(warm: Any, orm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    session_id = await open_session(warm)
    on_session = {"mcp-session-id": session_id, "mcp-protocol-version": LEGACY}
    with counting(monkeypatch) as cost:
        assert (await call(warm, ECHO, headers=on_session)).status == 200
    assert cost.queries == []
    await orm(lambda: McpSession.objects.get(digest__isnull=False, agent=warm.agent).terminate())
    assert (await call(warm, ECHO, headers=on_session)).status == 404


async def test_a_session_ended_with_delete_is_404_at_once(warm: Any) -> None:
    session_id = await open_session(warm)
    on_session = {"mcp-session-id": session_id, "mcp-protocol-version": LEGACY}
    assert (await call(warm, ECHO, headers=on_session)).status == 200
    assert (await call(warm, method="DELETE", headers=on_session)).status == 204
    assert (await call(warm, ECHO, headers=on_session)).status == 404


async def test_an_idle_session_expires_unless_another_process_saw_it_since(
    warm: Any, orm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = timedelta(seconds=3600)  # SESSION_IDLE_SECONDS
    session_id = await open_session(warm)
    on_session = {"mcp-session-id": session_id, "mcp-protocol-version": LEGACY}
    assert (await call(warm, ECHO, headers=on_session)).status == 200
    start = timezone.now()
    # Another process served the session 50 minutes later and wrote its activity: this process reloads it
    # before declaring the session idle, and keeps it.
    await orm(McpSession.objects.filter(agent=warm.agent).update, last_seen_at=start + timedelta(minutes=50))
    later = start + idle + timedelta(minutes=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert (await call(warm, ECHO, headers=on_session)).status == 200
    # Nobody anywhere since that request: idle past the limit, 404.
    monkeypatch.setattr(timezone, "now", lambda: later + idle + timedelta(seconds=1))
    assert (await call(warm, ECHO, headers=on_session)).status == 404


async def test_clearing_a_server_s_tokens_is_403_at_once(warm: Any, orm: Any) -> None:
    await orm(lambda: McpServer.objects.get(pk=warm.server.pk).tokens.clear())
    assert (await call(warm, ECHO)).status == 403


async def test_a_snapshot_that_outlived_its_row_never_refuses_a_valid_request(warm: Any) -> None:
    """Rows replaced behind the ORM's back (raw SQL, a restored backup, a test database emptied between tests)
    leave snapshots no invalidation dropped; a refusal they would give is confirmed on fresh rows first."""
    import dataclasses

    from mcp_app import invalidation
    from mcp_app.caching import identity

    cached = identity.server(warm.server.server_id, load=False)
    assert cached is not None
    stale = dataclasses.replace(cached, pk=cached.pk + 1000, tenant_id=cached.tenant_id + 1000)
    identity.servers.put(warm.server.server_id, stale, frozenset(), invalidation.generation())
    assert identity.server(warm.server.server_id, load=False) is stale
    reply = await call(warm, ECHO)
    assert reply.status == 200
    assert identity.server(warm.server.server_id, load=False).pk == warm.server.pk
