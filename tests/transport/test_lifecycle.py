"""Seed 000 at the wire: initialize, ping, unknown methods, GET and DELETE on /mcp/<server_id>."""

from __future__ import annotations

import pytest

import mcp_app
from mcp_app.protocol.errors import METHOD_NOT_FOUND
from mcp_app.protocol.versions import HANDSHAKE_VERSIONS
from tests.helpers import call, rpc


async def test_initialize_without_version_answers_first_revision(make_access):
    access = await make_access(instructions="Use echo.")
    reply = await call(access, {"jsonrpc": "2.0", "method": "initialize", "id": 1})
    assert reply.status == 200
    assert reply.content_type == "application/json"
    result = reply.json()["result"]
    assert result["protocolVersion"] == "2024-11-05"
    assert result["capabilities"]["tools"]["listChanged"] is True
    assert result["serverInfo"] == {"name": "mcp-host", "version": mcp_app.__version__}
    assert result["instructions"] == "Use echo."


@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
async def test_initialize_echoes_supported_version(access, version):
    reply = await call(access, rpc("initialize", {"protocolVersion": version, "capabilities": {}}))
    assert reply.json()["result"]["protocolVersion"] == version
    assert "instructions" not in reply.json()["result"]


async def test_initialize_with_unknown_version_answers_latest(access):
    reply = await call(access, rpc("initialize", {"protocolVersion": "1999-01-01", "capabilities": {}}))
    assert reply.status == 200
    assert reply.json()["result"]["protocolVersion"] == "2025-11-25"


async def test_ping_returns_empty_result(access):
    reply = await call(access, rpc("ping", id=2))
    assert reply.status == 200
    assert reply.json() == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_unknown_method_is_method_not_found(access):
    reply = await call(access, rpc("tools/frobnicate", id="x"))
    body = reply.json()
    assert body["id"] == "x"
    assert body["error"]["code"] == METHOD_NOT_FOUND


async def test_get_without_event_stream_accept_returns_json_info(make_access):
    access = await make_access(title="Shop tools")
    reply = await call(access, method="GET", headers={"accept": "application/json"})
    assert reply.status == 200
    assert reply.content_type == "application/json"
    info = reply.json()
    assert info["name"] == "mcp-host"
    assert info["server"]["serverId"] == access.server.server_id
    assert info["server"]["title"] == "Shop tools"
    assert info["transport"] == "streamable-http"
    assert info["tools"] == 4


async def test_delete_returns_204_without_body(access):
    reply = await call(access, method="DELETE")
    assert reply.status == 204
    assert reply.body == b""
    assert "content-type" not in reply.headers


async def test_other_methods_are_405_with_allow(access):
    reply = await call(access, rpc("ping"), method="PUT")
    assert reply.status == 405
    assert reply.headers["allow"] == "GET, POST, DELETE, OPTIONS"


async def test_trailing_slash_is_the_same_endpoint(access):
    reply = await call(access, rpc("ping"), path=access.path + "/")
    assert reply.json()["result"] == {}
