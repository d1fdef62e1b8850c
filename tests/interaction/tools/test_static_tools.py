"""Static tools (hosted mocks) at the wire, output-schema enforcement, icons, and pagination of list methods."""

from __future__ import annotations

import time

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


async def test_an_input_schema_pattern_is_matched_in_linear_time(access, orm, tool_factory):
    """Issue 25 #13's regex, written as a tool's JSON Schema ``pattern``: at 7eabff9 jsonschema searched it with
    ``re`` on the event loop (seconds at 25 characters, doubling per character); RE2 answers at once."""
    schema = {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}}}
    await orm(tool_factory, access.server, "guarded", input_schema=schema, static_result=text("ok"), position=98)
    started = time.monotonic()
    refused = await call(access, rpc("tools/call", {"name": "guarded", "arguments": {"text": "a" * 25 + "!"}}))
    took = time.monotonic() - started
    assert refused.status == 200 and "does not match" in str(refused.json())
    assert took < 1.0, took
    served = await call(access, rpc("tools/call", {"name": "guarded", "arguments": {"text": "a" * 25}}))
    assert served.json()["result"] == text("ok")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"text": {"type": "string", "pattern": r"^(a)\1$"}}},
        {"type": "object", "patternProperties": {"(?=x)": {}}},
        {"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False},
    ],
)
def test_input_schemas_that_cannot_be_checked_in_linear_time_are_refused_at_save(access, schema):
    from django.core.exceptions import ValidationError

    from mcp_app.models import Tool

    tool = Tool(tenant=access.tenant, name="guarded", input_schema=schema, static_result=text("ok"))
    with pytest.raises(ValidationError, match="linear time"):
        tool.full_clean()
