"""http tools at the wire: an agent lists and calls a tenant's webhook through the real router and consumer, in
both eras, against a real HTTP server on 127.0.0.1; its secret header reaches the server and nothing else."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest
from django.test import override_settings

from mcp_app.models import Tool, Webhook
from mcp_app.protocol.errors import INVALID_PARAMS
from tests.helpers import (
    WAIT_SECONDS,
    call,
    modern_call,
    modern_call_tool,
    result_of,
    rpc,
    settled,
    task,
    task_call_tool,
)
from tests.webhook_server import WebhookServer

LEGACY_VERSION = "2025-06-18"
SECRET = "Bearer wire-secret-91c2"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
LOCAL = {"HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}


def add_http_tool(tool_factory: Any, server: Any, url: str, name: str = "forecast", **fields: Any) -> Tool:
    tool = tool_factory(server, name, kind=Tool.Kind.HTTP, input_schema=SCHEMA, position=50, **fields)
    webhook = Webhook(tool=tool, url=url)
    webhook.set_secret_headers({"Authorization": SECRET})
    webhook.save()
    return tool


async def legacy_session(access: Any) -> dict[str, str]:
    init = await call(
        access,
        rpc(
            "initialize",
            {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        ),
    )
    assert init.status == 200
    headers = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": LEGACY_VERSION}
    assert (await call(access, rpc("notifications/initialized", id=None), headers=headers)).status == 202
    return headers


@override_settings(MCP_APP=LOCAL)
async def test_an_agent_calls_an_http_tool_in_the_handshake_era(
    access: Any, orm: Any, tool_factory: Any, webhook_server: WebhookServer, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    await orm(add_http_tool, tool_factory, access.server, webhook_server.url("/both"))
    session = await legacy_session(access)
    listed = (await call(access, rpc("tools/list"), headers=session)).json()["result"]["tools"]
    assert {"name": "forecast", "inputSchema": SCHEMA} in listed
    reply = await call(
        access, rpc("tools/call", {"name": "forecast", "arguments": {"city": "Oslo"}}, id=7), headers=session
    )
    assert reply.status == 200
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": [{"type": "text", "text": "warm"}], "structuredContent": {"temp": 30}},
    }
    (received,) = webhook_server.requests
    assert received.headers["Authorization"] == SECRET
    assert received.json()["arguments"] == {"city": "Oslo"}
    assert received.json()["agent"] == access.agent.agent_id
    assert received.json()["server"] == access.server.server_id
    assert SECRET not in caplog.text


@override_settings(MCP_APP=LOCAL)
async def test_an_agent_calls_an_http_tool_in_the_stateless_era(
    access: Any, orm: Any, tool_factory: Any, webhook_server: WebhookServer
):
    await orm(add_http_tool, tool_factory, access.server, webhook_server.url("/content"))
    listed = result_of(await modern_call(access, "tools/list"))["tools"]
    assert any(tool["name"] == "forecast" for tool in listed)
    result = result_of(await modern_call_tool(access, "forecast", {"city": "Oslo"}))
    assert result["content"] == [{"type": "text", "text": "hello from the webhook"}]
    assert result["resultType"] == "complete"
    assert webhook_server.requests[0].json()["agent"] == access.agent.agent_id
    assert webhook_server.requests[0].headers["Authorization"] == SECRET


@override_settings(MCP_APP=LOCAL)
async def test_failures_are_error_results_and_bad_arguments_are_invalid_params_in_both_eras(
    access: Any, orm: Any, tool_factory: Any, webhook_server: WebhookServer
):
    await orm(add_http_tool, tool_factory, access.server, webhook_server.url("/status/502"))
    session = await legacy_session(access)
    legacy = await call(access, rpc("tools/call", {"name": "forecast", "arguments": {"city": "x"}}), headers=session)
    modern = result_of(await modern_call_tool(access, "forecast", {"city": "x"}))
    for result in (legacy.json()["result"], modern):
        assert result["isError"] is True
        assert "HTTP 502" in result["content"][0]["text"]
        assert orjson.loads(result["content"][1]["text"])["code"] == "WEBHOOK_HTTP_STATUS"
    bad = await modern_call_tool(access, "forecast", {"city": 3})
    assert bad.status == 400 and bad.json()["error"]["code"] == INVALID_PARAMS
    assert len(webhook_server.requests) == 2


async def test_without_the_allow_list_a_loopback_webhook_is_refused_at_the_wire(
    access: Any, orm: Any, tool_factory: Any, webhook_server: WebhookServer
):
    with override_settings(MCP_APP=LOCAL):
        await orm(add_http_tool, tool_factory, access.server, webhook_server.url("/content"))
    result = result_of(await modern_call_tool(access, "forecast", {"city": "Oslo"}))
    assert result["isError"] is True
    assert orjson.loads(result["content"][1]["text"])["code"] == "WEBHOOK_FORBIDDEN_ADDRESS"
    assert webhook_server.requests == []


@override_settings(MCP_APP=LOCAL)
async def test_a_slow_http_tool_becomes_a_task_that_completes(
    access: Any, orm: Any, tool_factory: Any, webhook_server: WebhookServer
):
    await orm(add_http_tool, tool_factory, access.server, webhook_server.url("/slow"), task_support="optional")
    created = result_of(await task_call_tool(access, "forecast", {"city": "Oslo"}))
    assert created["resultType"] == "task" and created["status"] == "working"
    webhook_server.released.set()
    await settled()
    done = result_of(await task(access, "tasks/get", created["taskId"]))
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "late"}]


@override_settings(MCP_APP=LOCAL)
async def test_cancelling_an_http_task_aborts_its_request(
    access: Any, orm: Any, tool_factory: Any, webhook_server: WebhookServer
):
    await orm(add_http_tool, tool_factory, access.server, webhook_server.url("/hold"), task_support="optional")
    created = result_of(await task_call_tool(access, "forecast", {"city": "Oslo"}))
    assert await asyncio.to_thread(webhook_server.received.wait, 5)
    result_of(await task(access, "tasks/cancel", created["taskId"]))
    # First the work ends (bounded: ``settled`` fails naming what still runs) and the record says why, then the
    # webhook sees its connection closed: each failure names its own cause.
    await settled()
    record = result_of(await task(access, "tasks/get", created["taskId"]))
    assert record["status"] == "cancelled", record
    assert await asyncio.to_thread(webhook_server.closed_by_client.wait, WAIT_SECONDS)
