"""The resource-server edge with OAuth access tokens, at the wire: metadata, challenges, audience binding."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.models import AgentToken
from tests.helpers import call, rpc, tool_call
from tests.oauth_flow import Issued
from tests.request_path import caches_ready, counting

LIST = rpc("tools/list")


async def test_oauth_token_calls_without_agent_id(oauth: Issued) -> None:
    reply = await call(oauth, LIST)
    assert reply.status == 200, reply.body
    names = {tool["name"] for tool in reply.json()["result"]["tools"]}
    assert "echo" in names
    called = await call(oauth, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert called.status == 200
    assert called.json()["result"]["content"][0]["text"] == "hi"


async def test_no_authorization_without_agent_id_is_401_with_metadata(oauth: Issued) -> None:
    reply = await call(oauth, LIST, drop=("authorization",))
    assert reply.status == 401
    challenge = reply.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert (
        f'resource_metadata="http://localhost/.well-known/oauth-protected-resource/mcp/{oauth.server.server_id}"'
        in challenge
    )
    assert "invalid_token" not in challenge


async def test_bad_token_challenge_says_invalid_token(oauth: Issued) -> None:
    reply = await call(oauth, LIST, headers={"authorization": "Bearer mcp_00000000_nope"})
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]
    assert "resource_metadata=" in reply.headers["www-authenticate"]


async def test_agent_id_must_match(oauth: Issued, orm: Any) -> None:
    token = await orm(lambda: AgentToken.objects.select_related("agent").get(oauth_consent__isnull=False))
    ok = await call(oauth, LIST, query=f"agentId={token.agent.agent_id}")
    assert ok.status == 200
    other = await call(oauth, LIST, query="agentId=someone-else")
    assert other.status == 403
    assert 'error="insufficient_scope"' in other.headers["www-authenticate"]
    assert "resource_metadata=" in other.headers["www-authenticate"]


async def test_token_at_another_server_is_401(oauth: Issued, orm: Any, server_factory: Any) -> None:
    same_tenant = await orm(server_factory, tenant=oauth.server.tenant)
    reply = await call(oauth, LIST, path=f"/mcp/{same_tenant.server_id}")
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]
    elsewhere = await orm(server_factory)
    assert (await call(oauth, LIST, path=f"/mcp/{elsewhere.server_id}")).status == 401


async def test_oauth_off_server_refuses_oauth_tokens(oauth: Issued, orm: Any) -> None:
    from mcp_app.models import McpServer

    server = oauth.server
    await orm(
        lambda: McpServer.objects.get(pk=server.pk).__class__.objects.filter(pk=server.pk).update(oauth_enabled=False)
    )
    from mcp_app.invalidation import publish

    await orm(publish, f"server:{server.pk}")
    reply = await call(oauth, LIST)
    assert reply.status == 401
    bare = await call(oauth, LIST, drop=("authorization",))
    assert bare.status == 400  # as before OAuth: agentId first


@pytest.mark.parametrize("mode", ["stateless", "modern"])
async def test_a_warm_call_with_an_oauth_token_runs_no_query_and_no_hop(
    mode: str, oauth_world: Any, orm: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The same budget as agent tokens (``test_request_path``): the OAuth token resolves from the identity cache."""
    from django.test import Client

    from mcp_app.caching import writebehind
    from tests.oauth_flow import run_flow

    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_INTERVAL_SECONDS": 3600}
    access, user = oauth_world
    issued = await orm(run_flow, Client(), user, access.server)
    await caches_ready()
    body, headers = tool_call(mode, "echo", "warm")
    with counting(monkeypatch) as cost:
        cold = await call(issued, body, headers=headers)
        assert cold.status == 200, cold.body
        assert cost.queries and cost.hops[0] == "_admit", cost.hops
        await orm(writebehind.flush)
        cost.reset()
        warm = await call(issued, body, headers=headers)
        assert (cost.queries, cost.hops) == ([], [])  # echo is sync but declares it never blocks: no hop
    assert warm.status == 200
    assert warm.json()["result"]["content"] == [{"type": "text", "text": "warm"}]


async def test_a_token_of_another_tenant_is_401_at_its_server(oauth: Issued, make_access: Any) -> None:
    foreign = await make_access()
    reply = await call(oauth, LIST, path=foreign.path)
    assert reply.status == 401
    assert 'error="invalid_token"' in reply.headers["www-authenticate"]
