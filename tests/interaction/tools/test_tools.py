"""tools/list and tools/call at the wire: catalog order, bindings, python and static kinds, errors."""

from __future__ import annotations

import orjson
import pytest

from mcp_app.models import McpServer, ServerTool, Tool
from mcp_app.protocol.errors import INVALID_PARAMS
from tests.helpers import call, rpc


def tool_call(name, arguments=None, id=1):
    params = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return rpc("tools/call", params, id=id)


async def test_tools_list_follows_binding_order(make_access):
    access = await make_access(tools=("progress_demo", "echo", "get_time", "add"))
    reply = await call(access, rpc("tools/list"))
    assert [tool["name"] for tool in reply.json()["result"]["tools"]] == ["progress_demo", "echo", "get_time", "add"]


async def test_tool_without_properties_has_empty_properties_object(access):
    tools = (await call(access, rpc("tools/list"))).json()["result"]["tools"]
    get_time = next(tool for tool in tools if tool["name"] == "get_time")
    assert get_time["inputSchema"]["properties"] == {}
    assert get_time["inputSchema"]["type"] == "object"


async def test_static_tool_with_null_schema_parts_is_listed_with_properties(access, orm, tool_factory):
    await orm(
        tool_factory, access.server, "mock", position=9, input_schema={"type": "object"}, static_result={"content": []}
    )
    tools = (await call(access, rpc("tools/list"))).json()["result"]["tools"]
    assert tools[-1]["name"] == "mock"
    assert tools[-1]["inputSchema"] == {"type": "object", "properties": {}}


async def test_tools_list_is_deterministic_and_reflects_edits(access, orm):
    first = (await call(access, rpc("tools/list"))).json()["result"]["tools"]
    second = (await call(access, rpc("tools/list"))).json()["result"]["tools"]
    assert first == second
    await orm(ServerTool.objects.filter(server=access.server, tool__name="echo").update, enabled=False)
    # A queryset update bypasses signals; the supported path is save(), which bumps the catalog version.
    binding = await orm(ServerTool.objects.get, server=access.server, tool__name="add")
    binding.name_override = "sum"
    binding.description_override = "Sum two numbers."
    await orm(binding.save)
    names = [tool["name"] for tool in (await call(access, rpc("tools/list"))).json()["result"]["tools"]]
    assert names == ["sum", "get_time", "progress_demo"]


async def test_call_echo(access):
    reply = await call(access, tool_call("echo", {"text": "héllo"}))
    assert reply.status == 200
    assert reply.json()["result"] == {"content": [{"type": "text", "text": "héllo"}]}


async def test_call_add_returns_structured_content(access):
    result = (await call(access, tool_call("add", {"a": 2, "b": 3.5}))).json()["result"]
    assert result["structuredContent"] == {"result": 5.5}
    assert result["content"] == [{"type": "text", "text": "5.5"}]


async def test_add_advertises_its_output_schema(access):
    tools = (await call(access, rpc("tools/list"))).json()["result"]["tools"]
    add = next(tool for tool in tools if tool["name"] == "add")
    assert add["outputSchema"] == {
        "type": "object",
        "properties": {"result": {"type": "number"}},
        "required": ["result"],
    }


async def test_call_get_time_without_arguments(access):
    result = (await call(access, tool_call("get_time"))).json()["result"]
    assert result["content"][0]["text"].endswith("+00:00")


async def test_missing_params_is_invalid_params(access):
    reply = await call(access, rpc("tools/call"))
    assert reply.json()["error"]["code"] == INVALID_PARAMS


async def test_unknown_tool_is_invalid_params(access):
    reply = await call(access, tool_call("nope", {}))
    assert reply.status == 200
    error = reply.json()["error"]
    assert error["code"] == INVALID_PARAMS
    assert error["message"] == "Unknown tool: nope"


async def test_tool_of_the_tenant_not_bound_to_this_server_is_unknown(access, orm):
    await orm(Tool.objects.create, tenant=access.tenant, name="hidden", static_result={"content": []})
    reply = await call(access, tool_call("hidden", {}))
    assert reply.json()["error"]["code"] == INVALID_PARAMS


@pytest.mark.parametrize(("version", "in_result"), [("2025-03-26", False), ("2025-06-18", False), ("2025-11-25", True)])
async def test_invalid_arguments_take_the_form_of_the_revision(access, version, in_result):
    reply = await call(access, tool_call("add", {"a": "two"}), headers={"mcp-protocol-version": version})
    body = reply.json()
    if in_result:
        assert body["result"]["isError"] is True
        assert "a: Input should be a valid number" in body["result"]["content"][0]["text"]
    else:
        assert body["error"]["code"] == INVALID_PARAMS
        assert "b: Field required" in body["error"]["message"]


async def test_unknown_argument_is_rejected_by_closed_schema(access):
    reply = await call(access, tool_call("echo", {"text": "a", "extra": 1}))
    assert reply.json()["error"]["code"] == INVALID_PARAMS


async def test_static_tool_returns_canned_result(access, orm, tool_factory):
    canned = {"content": [{"type": "text", "text": "mocked"}], "structuredContent": {"ok": True}}
    await orm(tool_factory, access.server, "mock", static_result=canned)
    reply = await call(access, tool_call("mock", {}))
    assert reply.json()["result"] == canned


async def test_static_tool_returns_configured_jsonrpc_error(access, orm, tool_factory):
    await orm(
        tool_factory,
        access.server,
        "flaky",
        static_error={"code": -32050, "message": "Upstream down", "data": {"retry": 5}},
    )
    reply = await call(access, tool_call("flaky", {}, id=9))
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": -32050, "message": "Upstream down", "data": {"retry": 5}},
    }


async def test_static_tool_validates_arguments_against_its_schema(access, orm, tool_factory):
    schema = {
        "type": "object",
        "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["sku"],
        "additionalProperties": False,
    }
    await orm(tool_factory, access.server, "lookup", input_schema=schema, static_result={"content": []})
    bad = await call(access, tool_call("lookup", {"sku": "abc"}))
    good = await call(access, tool_call("lookup", {"sku": "ABC"}))
    assert bad.json()["error"]["code"] == INVALID_PARAMS
    assert "sku" in bad.json()["error"]["message"]
    assert good.json()["result"] == {"content": []}


async def test_tool_refusal_is_an_error_result_with_a_machine_readable_detail(make_access):
    access = await make_access(tools=("refuse",))
    result = (await call(access, tool_call("refuse", {"reason": "quota exhausted"}))).json()["result"]
    assert result["isError"] is True
    human, detail = result["content"]
    assert human == {"type": "text", "text": "quota exhausted"}
    assert orjson.loads(detail["text"]) == {
        "code": "TOOL_ERROR",
        "message": "quota exhausted",
        "error_type": "tool_error",
    }


async def test_unexpected_tool_exception_leaks_nothing(make_access):
    access = await make_access(tools=("boom",))
    reply = await call(access, tool_call("boom", {}))
    assert reply.status == 200
    assert b"hunter2" not in reply.body
    assert reply.json()["result"]["isError"] is True
    assert reply.json()["result"]["content"][0]["text"] == "Tool boom failed with an internal error"


async def test_unregistered_python_tool_is_left_out_of_the_catalog(access, orm):
    def rename_registration():
        # A registration that disappears after the row was saved (code removed on deploy); a plain save of an
        # unregistered name is refused, so the row is changed behind the model's back.
        tool = Tool.objects.get(tenant=access.tenant, name="echo")
        Tool.objects.filter(pk=tool.pk).update(python_name="vanished")
        McpServer.objects.bump_catalog_version({access.server.pk})

    await orm(rename_registration)
    names = [tool["name"] for tool in (await call(access, rpc("tools/list"))).json()["result"]["tools"]]
    assert names == ["add", "get_time", "progress_demo"]
