"""Static tools (hosted mocks) at the wire, output-schema enforcement, icons, and pagination of list methods."""

from __future__ import annotations

import pytest
from django.test import override_settings

from mcp_app.protocol.errors import INVALID_PARAMS
from tests.helpers import call, rpc


def text(value):
    return {"content": [{"type": "text", "text": value}]}


async def test_matchers_pick_the_answer_and_progress_streams_first(access, orm, tool_factory):
    await orm(
        tool_factory,
        access.server,
        "weather",
        static_result=text("sunny"),
        static_cases=[
            {"equals": {"city": "Bergen"}, "result": text("rain")},
            {"pointer": [{"pointer": "/city", "matches": "^X"}], "error": {"code": -32050, "message": "unknown city"}},
        ],
        static_progress_steps=2,
    )
    bergen = await call(access, rpc("tools/call", {"name": "weather", "arguments": {"city": "Bergen"}}))
    assert bergen.json()["result"] == text("rain")
    xcity = await call(access, rpc("tools/call", {"name": "weather", "arguments": {"city": "Xanadu"}}))
    assert xcity.json()["error"] == {"code": -32050, "message": "unknown city"}
    streamed = await call(
        access, rpc("tools/call", {"name": "weather", "arguments": {"city": "Rome"}, "_meta": {"progressToken": "w"}})
    )
    messages = streamed.sse_messages()
    assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2]
    assert messages[-1]["result"] == text("sunny")


async def test_structured_content_that_breaks_the_output_schema_is_refused(access, orm, tool_factory):
    schema = {"type": "object", "properties": {"temp": {"type": "number"}}, "required": ["temp"]}
    await orm(
        tool_factory,
        access.server,
        "good",
        output_schema=schema,
        static_result={"content": [], "structuredContent": {"temp": 3}},
    )
    await orm(
        tool_factory,
        access.server,
        "bad",
        output_schema=schema,
        static_result={"content": [], "structuredContent": {"temp": "hot"}},
    )
    good = await call(access, rpc("tools/call", {"name": "good", "arguments": {}}))
    bad = await call(access, rpc("tools/call", {"name": "bad", "arguments": {}}))
    assert good.json()["result"]["structuredContent"] == {"temp": 3}
    assert bad.json()["result"]["isError"] is True
    assert "output schema" in bad.json()["result"]["content"][0]["text"]


async def test_icons_and_title_are_listed(access, orm, tool_factory):
    icons = [{"src": "https://example.com/i.png", "mimeType": "image/png", "sizes": ["48x48"]}]
    await orm(tool_factory, access.server, "pretty", title="Pretty", icons=icons, static_result=text("x"), position=99)
    tools = (await call(access, rpc("tools/list"))).json()["result"]["tools"]
    assert tools[-1]["title"] == "Pretty" and tools[-1]["icons"] == icons


@pytest.mark.parametrize("method", ["tools/list", "resources/list", "resources/templates/list", "prompts/list"])
async def test_invalid_cursor_is_invalid_params(access, method):
    reply = await call(access, rpc(method, {"cursor": "not-a-cursor"}))
    assert reply.json()["error"]["code"] == INVALID_PARAMS


async def test_lists_are_paginated_by_the_configured_page_size(make_access):
    access = await make_access()
    with override_settings(MCP_APP={"PAGE_SIZE": 3}):
        first = (await call(access, rpc("tools/list"))).json()["result"]
        second = (await call(access, rpc("tools/list", {"cursor": first["nextCursor"]}))).json()["result"]
    assert [tool["name"] for tool in first["tools"]] == ["echo", "add", "get_time"]
    assert [tool["name"] for tool in second["tools"]] == ["progress_demo"]
    assert "nextCursor" not in second


async def test_structured_content_is_also_serialised_as_text(access, orm, tool_factory):
    await orm(
        tool_factory, access.server, "structured", static_result={"content": [], "structuredContent": {"temp": 3}}
    )
    result = (await call(access, rpc("tools/call", {"name": "structured", "arguments": {}}))).json()["result"]
    assert result["content"] == [{"type": "text", "text": '{"temp":3}'}]
    assert result["structuredContent"] == {"temp": 3}
