"""``tools/list`` and ``tools/call`` against a hand-built catalog and a fake runner: wire shape and order,
-32602 for malformed calls, argument errors by revision, and progress notifications through ``ctx.emit``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_app.protocol.context import RequestContext
from mcp_app.protocol.descriptors import ToolDescriptor
from mcp_app.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS

from .fakes import ABSENT, Emitted, FakeRunner

MakeCtx = Callable[..., RequestContext]
Rpc = Callable[..., Awaitable[Any]]


async def test_tools_list_returns_the_wire_list_in_catalog_order(make_ctx: MakeCtx, rpc: Rpc) -> None:
    tools = [
        ToolDescriptor(
            name="zeta",
            title="Zeta",
            description="Last letter first.",
            input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
            output_schema={"type": "object", "properties": {"m": {"type": "integer"}}},
            annotations={"readOnlyHint": True},
        ),
        ToolDescriptor(name="alpha", input_schema={}),
        ToolDescriptor(name="mid", input_schema={"type": "object", "properties": None}),
    ]
    response = await rpc(make_ctx(tools=tools), "tools/list")
    assert response["result"] == {
        "tools": [
            {
                "name": "zeta",
                "title": "Zeta",
                "description": "Last letter first.",
                "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "outputSchema": {"type": "object", "properties": {"m": {"type": "integer"}}},
                "annotations": {"readOnlyHint": True},
            },
            {"name": "alpha", "inputSchema": {"type": "object", "properties": {}}},
            {"name": "mid", "inputSchema": {"type": "object", "properties": {}}},
        ]
    }
    assert tools[1].input_schema == {}  # serialising does not touch the descriptor


async def test_tools_call_passes_arguments_and_context_to_the_runner(
    make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner
) -> None:
    ctx = make_ctx()
    response = await rpc(ctx, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=3)
    assert response == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [{"type": "text", "text": "ran echo"}], "isError": False},
    }
    [(name, arguments, call)] = runner.calls
    assert (name, arguments) == ("echo", {"text": "hi"})
    assert call.request is ctx


async def test_tools_call_without_arguments_gives_the_runner_an_empty_object(
    make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner
) -> None:
    await rpc(make_ctx(), "tools/call", {"name": "now"})
    assert [arguments for _, arguments, _ in runner.calls] == [{}]


@pytest.mark.parametrize(
    "params",
    [
        pytest.param(ABSENT, id="params-missing"),
        pytest.param({}, id="params-empty"),
        pytest.param({"arguments": {}}, id="name-missing"),
        pytest.param({"name": 5}, id="name-int"),
        pytest.param({"name": None}, id="name-null"),
        pytest.param({"name": ""}, id="name-empty"),
        pytest.param({"name": "echo", "arguments": [1]}, id="arguments-array"),
        pytest.param({"name": "echo", "arguments": "text=hi"}, id="arguments-string"),
        pytest.param({"name": "missing"}, id="unknown-tool"),
    ],
)
async def test_malformed_tools_call_is_invalid_params(
    make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner, params: Any
) -> None:
    response = await rpc(make_ctx(), "tools/call", params, id=9)
    assert response["id"] == 9
    assert response["error"]["code"] == INVALID_PARAMS
    assert runner.calls == []


async def test_unknown_tool_error_names_the_tool(make_ctx: MakeCtx, rpc: Rpc) -> None:
    error = (await rpc(make_ctx(), "tools/call", {"name": "missing"}))["error"]
    assert error["data"] == {"name": "missing"}


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18"])
async def test_invalid_arguments_are_a_protocol_error_before_2025_11_25(
    make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner, version: str
) -> None:
    runner.reject = "text is required"
    response = await rpc(make_ctx(protocol_version=version), "tools/call", {"name": "echo"})
    assert response["error"]["code"] == INVALID_PARAMS
    assert "text is required" in response["error"]["message"]


async def test_invalid_arguments_are_an_error_result_from_2025_11_25(
    make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner
) -> None:
    runner.reject = "text is required"
    response = await rpc(make_ctx(protocol_version="2025-11-25"), "tools/call", {"name": "echo"})
    assert "error" not in response
    result = response["result"]
    assert result["isError"] is True
    [block] = result["content"]
    assert block["type"] == "text"
    assert "text is required" in block["text"]


async def test_runner_crash_is_a_bare_internal_error(make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner) -> None:
    runner.error = RuntimeError("dsn=postgres://admin:hunter2@db")
    response = await rpc(make_ctx(), "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=4)
    assert response == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": INTERNAL_ERROR, "message": "Internal error"},
    }


@pytest.mark.parametrize("token", ["tok-1", 0])
async def test_progress_is_emitted_for_a_token_and_only_while_increasing(
    make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner, emitted: Emitted, token: str | int
) -> None:
    runner.progress = [1, 2, 2, 1.5, 4]
    params = {"name": "now", "_meta": {"progressToken": token}}
    response = await rpc(make_ctx(), "tools/call", params)
    assert response["result"]["isError"] is False
    assert emitted == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": token, "progress": value, "total": 10},
        }
        for value in (1, 2, 4)
    ]


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"name": "now"}, id="no-meta"),
        pytest.param({"name": "now", "_meta": {}}, id="no-token"),
        pytest.param({"name": "now", "_meta": {"progressToken": True}}, id="bool-token"),
        pytest.param({"name": "now", "_meta": {"progressToken": 1.5}}, id="float-token"),
    ],
)
async def test_no_progress_is_emitted_without_a_valid_token(
    make_ctx: MakeCtx, rpc: Rpc, runner: FakeRunner, emitted: Emitted, params: dict[str, Any]
) -> None:
    runner.progress = [1, 2, 3]
    response = await rpc(make_ctx(), "tools/call", params)
    assert response["result"]["isError"] is False
    assert emitted == []
    [(_, _, call)] = runner.calls
    assert call.progress.enabled is False
