"""Catalog versions at the wire, through the real consumer: a server that reviews edits keeps serving its published
definitions (tools/list, and the schema a call is validated against) until publication; publishing and rolling back
change what tools/list says; publication, not the edit, is what a live stream hears; and the warm tools/call of a
server with a published version still runs no query and no thread hop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_app.catalog import versions
from mcp_app.models import CatalogVersion, McpServer, Tool
from tests.helpers import call, communicator, open_session, rpc, sse_messages
from tests.helpers import tool_call as era_tool_call
from tests.request_path import assert_warm_call_is_free

ANSWER = {"content": [{"type": "text", "text": "sunny"}]}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ZIP = {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"], "additionalProperties": False}


@pytest.fixture
def reviewed(transactional_db: Any, server_factory: Any, tool_factory: Any, access_factory: Any) -> Any:
    """A server that reviews edits, exposing a static ``weather`` tool (published as version 2: version 1 is the
    baseline published when the server was created, before it had tools)."""
    access = access_factory(tools=(), review_edits=True)
    tool_factory(
        access.server, "weather", kind=Tool.Kind.STATIC, static_result=ANSWER, description="Ask.", input_schema=CITY
    )
    versions.publish(McpServer.objects.get(pk=access.server.pk))
    return access


async def tools_list(access: Any, session: str) -> list[dict[str, Any]]:
    reply = await call(access, rpc("tools/list"), headers={"mcp-session-id": session})
    assert reply.status == 200, reply.body
    return reply.json()["result"]["tools"]


async def call_weather(access: Any, session: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = rpc("tools/call", {"name": "weather", "arguments": arguments})
    reply = await call(access, body, headers={"mcp-session-id": session})
    assert reply.status == 200, reply.body
    return reply.json()


def change_weather(access: Any, **fields: Any) -> None:
    tool = Tool.objects.get(tenant=access.tenant, name="weather")
    for name, value in fields.items():
        setattr(tool, name, value)
    tool.save()


async def test_edits_wait_for_publication_and_rollback_restores_the_old_definition(reviewed: Any, orm: Any) -> None:
    session = await open_session(reviewed)
    assert await tools_list(reviewed, session) == [{"name": "weather", "description": "Ask.", "inputSchema": CITY}]
    await orm(change_weather, reviewed, description="Ask by postcode.", input_schema=ZIP)
    assert await tools_list(reviewed, session) == [{"name": "weather", "description": "Ask.", "inputSchema": CITY}]

    # The call runs the published definition: validated against the published schema, not the draft's.
    served = await call_weather(reviewed, session, {"city": "Oslo"})
    assert served["result"]["content"] == ANSWER["content"] and not served["result"].get("isError")
    refused = await call_weather(reviewed, session, {"zip": "0150"})
    assert refused["result"]["isError"] is True
    assert refused["result"]["content"][0]["text"].startswith("Invalid arguments for tool weather: ")
    assert "'city' is a required property" in refused["result"]["content"][0]["text"]

    third = await orm(lambda: versions.publish(McpServer.objects.get(pk=reviewed.server.pk)))
    assert third.number == 3
    assert await tools_list(reviewed, session) == [
        {"name": "weather", "description": "Ask by postcode.", "inputSchema": ZIP}
    ]
    assert (await call_weather(reviewed, session, {"zip": "0150"}))["result"]["content"] == ANSWER["content"]
    assert (await call_weather(reviewed, session, {"city": "Oslo"}))["result"]["isError"] is True

    fourth = await orm(lambda: versions.rollback(McpServer.objects.get(pk=reviewed.server.pk), 2))
    assert (fourth.number, fourth.rolled_back_to) == (4, 2)
    assert await tools_list(reviewed, session) == [{"name": "weather", "description": "Ask.", "inputSchema": CITY}]
    assert (await call_weather(reviewed, session, {"city": "Oslo"}))["result"]["content"] == ANSWER["content"]


async def test_a_stream_hears_the_publication_not_the_edit(reviewed: Any, orm: Any) -> None:
    session = await open_session(reviewed)
    stream = communicator(reviewed, method="GET", headers={"accept": "text/event-stream", "mcp-session-id": session})
    await stream.send_input({"type": "http.request", "body": b""})
    assert (await stream.receive_output(timeout=5))["status"] == 200
    await stream.receive_output(timeout=5)  # priming event and ": ready"
    await orm(change_weather, reviewed, description="Edited.")
    assert await stream.receive_nothing(timeout=0.5)
    await orm(lambda: versions.publish(McpServer.objects.get(pk=reviewed.server.pk)))
    heard = sse_messages((await stream.receive_output(timeout=5))["body"])
    assert heard == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
    # Publishing the same content again writes nothing and announces nothing.
    await orm(lambda: versions.publish(McpServer.objects.get(pk=reviewed.server.pk)))
    assert await stream.receive_nothing(timeout=0.5)
    await stream.send_input({"type": "http.disconnect"})
    await stream.wait(timeout=5)


async def test_an_edit_is_published_and_announced_at_once_by_default(
    make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    access = await make_access(tools=("echo",))
    session = await open_session(access)
    stream = communicator(access, method="GET", headers={"accept": "text/event-stream", "mcp-session-id": session})
    await stream.send_input({"type": "http.request", "body": b""})
    assert (await stream.receive_output(timeout=5))["status"] == 200
    await stream.receive_output(timeout=5)
    echo = await orm(Tool.objects.get, tenant=access.tenant, name="echo")
    echo.description = "Says it back."
    await orm(echo.save)
    heard = sse_messages((await stream.receive_output(timeout=5))["body"])
    assert heard == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
    listed = await tools_list(access, session)
    assert [(tool["name"], tool["description"]) for tool in listed] == [("echo", "Says it back.")]
    # Binding the tool published version 1 (with the registered description); the edit published version 2.
    published = await orm(lambda: list(CatalogVersion.objects.filter(server_id=access.server.pk).order_by("number")))
    assert [(v.number, v.source, v.entries[0]["definition"]["description"]) for v in published] == [
        (1, "edit", "Return the given text unchanged."),
        (2, "edit", "Says it back."),
    ]
    await stream.send_input({"type": "http.disconnect"})
    await stream.wait(timeout=5)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_warm_call_with_a_published_version_runs_no_query_and_no_hop(
    era: str, make_access: Callable[..., Awaitable[Any]], orm: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_INTERVAL_SECONDS": 3600}
    access = await make_access(tools=("async_echo",), review_edits=True)
    version = await orm(lambda: versions.publish(McpServer.objects.get(pk=access.server.pk)))
    assert [entry["definition"]["name"] for entry in version.entries] == ["async_echo"]
    body, headers = era_tool_call(era, "async_echo", "hi")
    await assert_warm_call_is_free(monkeypatch, access, body, headers)
