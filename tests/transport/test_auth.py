"""Seed 000 auth middleware at the wire, plus server resolution: 400/401/403/404 and who is on the context."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from mcp_app.models import Agent, AgentToken, McpServer, Tenant
from tests.helpers import call, rpc

WHOAMI = rpc("tools/call", {"name": "whoami", "arguments": {}})


async def test_missing_agent_id_is_400(access):
    reply = await call(access, rpc("ping"), query="")
    assert reply.status == 400
    assert reply.content_type == "application/json"
    assert "agentId" in reply.json()["error"]["message"]


async def test_missing_authorization_is_401_with_bearer_challenge(access):
    reply = await call(access, rpc("ping"), drop=("authorization",))
    assert reply.status == 401
    # OAuth discovery (RFC 9728): the challenge names the server's protected-resource metadata.
    assert reply.headers["www-authenticate"] == (
        f'Bearer realm="mcp-host", resource_metadata="http://localhost/.well-known/oauth-protected-resource{access.path}"'
    )


@pytest.mark.parametrize(
    "authorization",
    ["Bearer mcp_00000000_not-a-real-token", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer garbage", "mcp_abc"],
)
async def test_invalid_token_is_401(access, authorization):
    reply = await call(access, rpc("ping"), headers={"authorization": authorization})
    assert reply.status == 401
    assert reply.headers["www-authenticate"].startswith('Bearer realm="mcp-host"')


async def test_scheme_is_case_insensitive(access):
    reply = await call(access, rpc("ping"), headers={"authorization": f"bearer {access.raw_token}"})
    assert reply.status == 200


async def test_expired_token_is_401(access, orm):
    await orm(AgentToken.objects.filter(pk=access.token.pk).update, expires_at=timezone.now() - timedelta(seconds=1))
    reply = await call(access, rpc("ping"))
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]


async def test_revoked_token_is_401(access, orm):
    await orm(access.token.revoke)
    assert (await call(access, rpc("ping"))).status == 401


async def test_inactive_agent_is_401(access, orm):
    await orm(Agent.objects.filter(pk=access.agent.pk).update, is_active=False)
    assert (await call(access, rpc("ping"))).status == 401


async def test_token_of_another_existing_agent_is_403(access, orm):
    await orm(Agent.objects.create, tenant=access.tenant, agent_id="other", name="other")
    reply = await call(access, rpc("ping"), query="agentId=other")
    assert reply.status == 403


async def test_token_for_unknown_agent_id_is_403(access):
    reply = await call(access, rpc("ping"), query="agentId=nobody")
    assert reply.status == 403


async def test_token_not_scoped_to_the_server_is_403(access, orm):
    other = await orm(McpServer.objects.create, tenant=access.tenant, server_id="unscoped", name="unscoped")
    reply = await call(access, rpc("ping"), path=f"/mcp/{other.server_id}")
    assert reply.status == 403
    assert 'error="insufficient_scope"' in reply.headers["www-authenticate"]


async def test_valid_token_puts_agent_tenant_and_server_on_the_context(make_access):
    access = await make_access(tools=("whoami",))
    reply = await call(access, WHOAMI)
    assert reply.json()["result"]["structuredContent"] == {
        "tenant": access.tenant.slug,
        "agent_id": access.agent.agent_id,
        "server_id": access.server.server_id,
    }


async def test_successful_use_records_last_used(access, orm):
    from mcp_app.caching import writebehind

    assert access.token.last_used_at is None
    await call(access, rpc("ping"))
    await orm(writebehind.flush)  # what the background writer does every WRITE_BEHIND_INTERVAL_SECONDS
    token = await orm(AgentToken.objects.get, pk=access.token.pk)
    assert token.last_used_at is not None


async def test_unknown_server_is_404(access):
    reply = await call(access, rpc("ping"), path="/mcp/does-not-exist")
    assert reply.status == 404


async def test_disabled_server_and_inactive_tenant_look_exactly_like_unknown(access, orm):
    same_id = {"x-request-id": "same-id"}  # a fresh request id per request is the only difference allowed
    unknown = await call(access, rpc("ping"), path="/mcp/does-not-exist", headers=same_id)
    await orm(McpServer.objects.filter(pk=access.server.pk).update, enabled=False)
    disabled = await call(access, rpc("ping"), headers=same_id)
    await orm(McpServer.objects.filter(pk=access.server.pk).update, enabled=True)
    await orm(Tenant.objects.filter(pk=access.tenant.pk).update, is_active=False)
    inactive = await call(access, rpc("ping"), headers=same_id)
    assert unknown.status == disabled.status == inactive.status == 404
    assert unknown.body == disabled.body == inactive.body
    assert unknown.headers == disabled.headers == inactive.headers


async def test_server_of_another_tenant_is_404_not_403(access, make_access):
    foreign = await make_access()
    reply = await call(access, rpc("ping"), path=foreign.path)
    assert reply.status == 404


async def test_check_order_authorization_before_agent_id(access):
    """Issue 17: a client that knows only the URL gets the OAuth challenge, not a 400."""
    reply = await call(access, rpc("ping"), query="", drop=("authorization",))
    assert reply.status == 401
    assert "resource_metadata=" in reply.headers["www-authenticate"]


async def test_check_order_agent_id_first_when_oauth_is_off(make_access):
    access = await make_access(oauth_enabled=False)
    reply = await call(access, rpc("ping"), query="", drop=("authorization",))
    assert reply.status == 400
    plain = await call(access, rpc("ping"), drop=("authorization",))
    assert plain.status == 401
    assert plain.headers["www-authenticate"] == 'Bearer realm="mcp-host"'


async def test_unauthenticated_caller_learns_nothing_about_servers(access):
    known = await call(access, rpc("ping"), drop=("authorization",))
    unknown = await call(access, rpc("ping"), drop=("authorization",), path="/mcp/does-not-exist")
    assert known.status == unknown.status == 401
    assert known.body == unknown.body
