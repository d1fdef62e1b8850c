"""Hostile bodies at the wire: deep nesting, NUL characters, oversized client declarations.

Each is a clear 4xx (or a JSON-RPC error) and stores nothing: never a 500, a ``RecursionError`` or -32603.
Runs on PostgreSQL too (which rejects NUL in text and jsonb) when ``DATABASE_URL`` names it.
"""

from __future__ import annotations

import orjson
import pytest
from django.test import override_settings

from mcp_app.models import McpSession
from mcp_app.protocol.errors import INVALID_PARAMS, INVALID_REQUEST
from tests.helpers import call, modern_call, rpc


def nested(depth: int, leaf: object = 1) -> bytes:
    return b"[" * depth + orjson.dumps(leaf) + b"]" * depth


def initialize(**params: object) -> dict:
    base = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    return rpc("initialize", {**base, **params})


async def sessions(orm) -> int:
    return await orm(McpSession.objects.count)


async def test_a_thousand_levels_and_a_long_integer_is_400_not_a_recursion_error(access):
    # The long integer sends the body through the standard library's recursive exact-integer check.
    raw = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": ' + nested(1000, 10**18 * 9) + b"}}"
    reply = await call(access, raw=raw)
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    assert "64" in reply.json()["error"]["message"]


@pytest.mark.parametrize("field", ["protocolVersion", "clientInfo", "capabilities"])
async def test_deeply_nested_initialize_fields_are_400(access, orm, field):
    body = orjson.dumps(initialize()).replace(
        b'"' + field.encode() + b'":', b'"' + field.encode() + b'":' + nested(300) + b',"_":', 1
    )
    before = await sessions(orm)
    reply = await call(access, raw=body)
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    assert await sessions(orm) == before


async def test_tool_arguments_nested_254_levels_are_400_not_internal_error(access):
    raw = orjson.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": "x", "deep": 0}}))
    raw = raw.replace(b'"deep":0', b'"deep":' + nested(254))
    reply = await call(access, raw=raw)
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST


async def test_brackets_inside_strings_do_not_count(access):
    reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "[{" * 5000 + '\\"]'}}))
    assert reply.status == 200
    assert reply.json()["result"]["content"][0]["text"] == "[{" * 5000 + '\\"]'


@override_settings(MCP_APP={"MAX_JSON_DEPTH": 5})
async def test_the_depth_limit_is_a_setting(access):
    at_limit = {"name": "echo", "arguments": {"text": "x", "n": [[1]]}}  # body, params, arguments, n, [[ ]] = 5
    assert (await call(access, rpc("tools/call", at_limit))).status == 200
    over = {"name": "echo", "arguments": {"text": "x", "n": [[[1]]]}}
    reply = await call(access, rpc("tools/call", over))
    assert reply.status == 400
    assert "5 levels" in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    "params",
    [
        {"clientInfo": {"name": "nul\u0000name", "version": "1"}},
        {"capabilities": {"experimental": {"k\u0000ey": {}}}},
    ],
    ids=["clientInfo", "capability-key"],
)
async def test_nul_in_initialize_is_refused_before_a_session_is_stored(access, orm, params):
    before = await sessions(orm)
    reply = await call(access, initialize(**params))
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    assert "NUL" in reply.json()["error"]["message"]
    assert "mcp-session-id" not in reply.headers
    assert await sessions(orm) == before


async def test_nul_in_tool_arguments_and_task_ids_is_refused(access):
    call_reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "a\u0000b"}}))
    task_reply = await modern_call(access, "tasks/get", {"taskId": "t\u0000"})
    assert (call_reply.status, call_reply.json()["error"]["code"]) == (400, INVALID_REQUEST)
    assert task_reply.status == 400
    assert task_reply.json()["error"]["code"] == INVALID_REQUEST


async def test_an_escaped_backslash_before_u0000_is_not_a_nul(access):
    reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "\\u0000"}}))
    assert reply.status == 200
    assert reply.json()["result"]["content"][0]["text"] == "\\u0000"


async def test_a_mebibyte_of_capabilities_is_refused_and_not_stored(access, orm):
    before = await sessions(orm)
    huge = {"experimental": {"blob": {"data": "x" * (1024 * 1024)}}}
    reply = await call(access, initialize(capabilities=huge))
    assert reply.status == 200  # an error of the initialize method, on the handshake era's 200
    assert reply.json()["error"]["code"] == INVALID_PARAMS
    assert reply.json()["error"]["data"] == {"maxBytes": 16 * 1024}
    assert "mcp-session-id" not in reply.headers
    assert await sessions(orm) == before


@override_settings(MCP_APP={"MAX_CLIENT_INFO_BYTES": 200})
async def test_the_client_info_bound_is_a_setting_and_applies_to_the_stateless_envelope(access):
    small = await modern_call(access, "tools/list", capabilities={})
    big = await modern_call(access, "tools/list", capabilities={"experimental": {"x": "y" * 300}})
    assert small.status == 200
    assert big.status == 400
    assert big.json()["error"]["code"] == INVALID_PARAMS
