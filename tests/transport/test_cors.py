"""CORS at the wire: preflights and answers for a server's allowed origins, nothing for other origins."""

from __future__ import annotations

import pytest
from django.test import override_settings

from mcp_app.models import McpServer
from tests.helpers import call, rpc

APP = "https://app.example"
EVIL = "https://evil.example"


@pytest.fixture
async def browser_access(access, orm):
    await orm(McpServer.objects.filter(pk=access.server.pk).update, allowed_origins=[APP])
    return access


def preflight(origin: str, requested: str = "authorization, content-type, mcp-session-id, mcp-protocol-version"):
    return {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": requested,
    }


async def test_a_preflight_from_an_allowed_origin_names_methods_headers_and_max_age(browser_access):
    reply = await call(browser_access, method="OPTIONS", headers=preflight(APP), drop=("authorization",))
    assert reply.status == 204
    assert reply.headers["access-control-allow-origin"] == APP
    assert set(reply.headers["access-control-allow-methods"].split(", ")) == {"GET", "POST", "DELETE", "OPTIONS"}
    allowed = {name.strip() for name in reply.headers["access-control-allow-headers"].split(",")}
    assert allowed == {"authorization", "content-type", "mcp-session-id", "mcp-protocol-version"}
    assert reply.headers["access-control-max-age"] == "600"
    assert "Origin" in reply.headers["vary"]
    assert "access-control-allow-credentials" not in reply.headers


async def test_a_preflight_keeps_mcp_param_headers_and_drops_others(browser_access):
    reply = await call(
        browser_access,
        method="OPTIONS",
        headers=preflight(APP, "Mcp-Param-Region, X-Evil, Last-Event-ID"),
        drop=("authorization",),
    )
    assert reply.headers["access-control-allow-headers"] == "mcp-param-region, last-event-id"


@pytest.mark.parametrize("server_path", [None, "/mcp/no-such-server"])
async def test_other_origins_and_unknown_servers_get_no_cors_headers(browser_access, server_path):
    origin = EVIL if server_path is None else APP
    reply = await call(
        browser_access, method="OPTIONS", headers=preflight(origin), drop=("authorization",), path=server_path
    )
    assert reply.status == 403
    assert not [name for name in reply.headers if name.startswith("access-control-")]


async def test_answers_to_an_allowed_origin_carry_cors_headers(browser_access):
    init = rpc(
        "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}
    )
    reply = await call(browser_access, init, headers={"origin": APP})
    assert reply.status == 200
    assert reply.headers["access-control-allow-origin"] == APP
    exposed = {name.strip().lower() for name in reply.headers["access-control-expose-headers"].split(",")}
    assert {"mcp-session-id", "mcp-protocol-version", "www-authenticate"} <= exposed
    assert "mcp-session-id" in reply.headers


async def test_answers_to_other_origins_carry_none(browser_access):
    refused = await call(browser_access, rpc("ping"), headers={"origin": EVIL})
    unauthenticated = await call(browser_access, rpc("ping"), headers={"origin": EVIL}, drop=("authorization",))
    unknown = await call(
        browser_access, rpc("ping"), headers={"origin": APP}, drop=("authorization",), path="/mcp/no-such-server"
    )
    assert refused.status == 403
    assert unauthenticated.status == 401 and unknown.status in (401, 404)
    for reply in (refused, unauthenticated, unknown):
        assert not [name for name in reply.headers if name.startswith("access-control-")]


async def test_the_401_that_starts_oauth_is_readable_by_an_allowed_origin(browser_access):
    # A browser client (the Inspector) must read WWW-Authenticate to discover the authorization server.
    for headers, drop in (({"origin": APP}, ("authorization",)), ({"origin": APP, "authorization": "Bearer x"}, ())):
        reply = await call(browser_access, rpc("ping"), headers=headers, drop=drop, query="")
        assert reply.status == 401
        assert reply.headers["access-control-allow-origin"] == APP
        exposed = {name.strip().lower() for name in reply.headers["access-control-expose-headers"].split(",")}
        assert "www-authenticate" in exposed
        assert "resource_metadata=" in reply.headers["www-authenticate"]
        assert "access-control-allow-credentials" not in reply.headers


@override_settings(MCP_APP={"ALLOWED_ORIGINS": [APP], "CORS_MAX_AGE_SECONDS": 60})
async def test_globally_allowed_origins_and_the_max_age_setting(access):
    preflighted = await call(access, method="OPTIONS", headers=preflight(APP), drop=("authorization",))
    unauthenticated = await call(access, rpc("ping"), headers={"origin": APP}, drop=("authorization",))
    assert preflighted.status == 204
    assert preflighted.headers["access-control-max-age"] == "60"
    assert unauthenticated.status == 401
    assert unauthenticated.headers["access-control-allow-origin"] == APP  # the browser may read the challenge
    assert "WWW-Authenticate" in unauthenticated.headers["access-control-expose-headers"]
