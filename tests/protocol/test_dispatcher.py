"""The dispatcher and the lifecycle handlers: ``initialize``, ``ping``, routing errors, notifications,
batches, and the boundary that turns an unexpected exception into a bare ``Internal error``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import mcp_app
from mcp_app.protocol.context import RequestContext
from mcp_app.protocol.dispatcher import Dispatcher, MessageContext
from mcp_app.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND
from mcp_app.protocol.handlers import dispatcher

MakeCtx = Callable[..., RequestContext]
Rpc = Callable[..., Awaitable[Any]]


def ping(id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "ping"}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("2030-01-01", "2025-11-25"),
        (None, "2024-11-05"),
    ],
)
async def test_initialize_negotiates_and_describes_the_server(
    make_ctx: MakeCtx, rpc: Rpc, requested: str | None, answered: str
) -> None:
    params: dict[str, Any] = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    if requested is not None:
        params["protocolVersion"] = requested
    response = await rpc(make_ctx(), "initialize", params, id="init")
    assert response == {
        "jsonrpc": "2.0",
        "id": "init",
        "result": {
            "protocolVersion": answered,
            "capabilities": {
                "tools": {"listChanged": True},
                "resources": {"listChanged": True, "subscribe": True},
                "prompts": {"listChanged": True},
                "completions": {},
                "logging": {},
            },
            "serverInfo": {"name": "mcp-host", "version": mcp_app.__version__},
        },
    }


async def test_initialize_carries_title_and_instructions_when_set(make_ctx: MakeCtx, rpc: Rpc) -> None:
    ctx = make_ctx(title="Weather", instructions="Call forecast first.")
    result = (await rpc(ctx, "initialize", {"protocolVersion": "2025-11-25"}))["result"]
    assert result["instructions"] == "Call forecast first."
    assert result["serverInfo"] == {"name": "mcp-host", "version": mcp_app.__version__, "title": "Weather"}


async def test_ping_answers_an_empty_result(make_ctx: MakeCtx, rpc: Rpc) -> None:
    assert await rpc(make_ctx(), "ping", id=42) == {"jsonrpc": "2.0", "id": 42, "result": {}}


async def test_unknown_method_is_method_not_found(make_ctx: MakeCtx, rpc: Rpc) -> None:
    response = await rpc(make_ctx(), "resources/frobnicate", id="r")
    assert response["id"] == "r"
    assert response["error"]["code"] == METHOD_NOT_FOUND


@pytest.mark.parametrize("params", [[1, 2], "x", 3, True])
async def test_params_that_are_not_an_object_are_invalid_params(make_ctx: MakeCtx, rpc: Rpc, params: Any) -> None:
    response = await rpc(make_ctx(), "ping", params, id=5)
    assert response["id"] == 5
    assert response["error"]["code"] == INVALID_PARAMS


async def test_invalid_single_message_is_answered_with_its_recovered_id(make_ctx: MakeCtx) -> None:
    response = await dispatcher.dispatch({"jsonrpc": "1.0", "id": 8, "method": "ping"}, make_ctx(), max_batch_size=10)
    assert response["id"] == 8
    assert response["error"]["code"] == INVALID_REQUEST


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(INITIALIZED, id="known-notification"),
        pytest.param({"jsonrpc": "2.0", "method": "notifications/unknown", "params": [1]}, id="unknown-notification"),
        pytest.param({"jsonrpc": "2.0", "id": 3, "result": {"roots": []}}, id="client-response"),
    ],
)
async def test_nothing_is_owed_for_notifications_and_client_responses(
    make_ctx: MakeCtx, message: dict[str, Any]
) -> None:
    assert await dispatcher.dispatch(message, make_ctx(), max_batch_size=10) is None


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26"])
async def test_batch_answers_requests_in_order_and_skips_notifications(make_ctx: MakeCtx, version: str) -> None:
    batch = [ping("c"), INITIALIZED, {"jsonrpc": "2.0", "id": "a", "method": "nope"}, ping(2), 42]
    responses = await dispatcher.dispatch(batch, make_ctx(protocol_version=version), max_batch_size=10)
    assert [response["id"] for response in responses] == ["c", "a", 2, None]
    assert responses[0]["result"] == {}
    assert responses[1]["error"]["code"] == METHOD_NOT_FOUND
    assert responses[3]["error"]["code"] == INVALID_REQUEST


async def test_batch_of_only_notifications_owes_nothing(make_ctx: MakeCtx) -> None:
    batch = [INITIALIZED, {"jsonrpc": "2.0", "id": 1, "result": {}}]
    assert await dispatcher.dispatch(batch, make_ctx(protocol_version="2025-03-26"), max_batch_size=10) is None


async def test_batch_of_exactly_max_size_is_answered(make_ctx: MakeCtx) -> None:
    responses = await dispatcher.dispatch([ping(1), ping(2)], make_ctx(protocol_version="2025-03-26"), max_batch_size=2)
    assert [response["result"] for response in responses] == [{}, {}]


@pytest.mark.parametrize(
    ("batch", "version"),
    [
        pytest.param([], "2025-03-26", id="empty"),
        pytest.param([ping(1), ping(2), ping(3)], "2025-03-26", id="over-max-size"),
        pytest.param([ping(1)], "2025-06-18", id="forbidden-by-version"),
        pytest.param([ping(1)], "2025-11-25", id="forbidden-by-latest"),
    ],
)
async def test_rejected_batches_are_one_invalid_request(make_ctx: MakeCtx, batch: list[Any], version: str) -> None:
    response = await dispatcher.dispatch(batch, make_ctx(protocol_version=version), max_batch_size=2)
    assert isinstance(response, dict)
    assert response["id"] is None
    assert response["error"]["code"] == INVALID_REQUEST


async def test_unexpected_exception_becomes_a_bare_internal_error(
    make_ctx: MakeCtx, caplog: pytest.LogCaptureFixture
) -> None:
    local = Dispatcher()

    @local.request("explode")
    async def explode(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
        raise RuntimeError("password=hunter2 at /srv/secret.db")

    with caplog.at_level(logging.ERROR, logger="mcp_app.protocol"):
        response = await local.dispatch({"jsonrpc": "2.0", "id": 1, "method": "explode"}, make_ctx(), max_batch_size=10)
    assert response == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": INTERNAL_ERROR, "message": "Internal error"},
    }
    assert "hunter2" not in str(response)
    assert caplog.records[-1].exc_info is not None  # the traceback goes to the log, not to the client


async def test_an_error_registered_as_unavailable_leaves_the_dispatcher_for_the_edge(make_ctx: MakeCtx) -> None:
    """The edge answers it with 503 and Retry-After (the app registers the database's errors), not a 200 carrying
    an internal error."""

    class Unreachable(Exception):
        pass

    local = Dispatcher()
    local.treat_as_unavailable(Unreachable)

    @local.request("query")
    async def query(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
        raise Unreachable("connection refused")

    with pytest.raises(Unreachable):
        await local.dispatch({"jsonrpc": "2.0", "id": 1, "method": "query"}, make_ctx(), max_batch_size=10)


async def test_failing_notification_handler_owes_nothing(make_ctx: MakeCtx) -> None:
    local = Dispatcher()
    seen: list[dict[str, Any]] = []

    @local.notification("notifications/cancelled")
    async def cancelled(params: dict[str, Any], ctx: RequestContext) -> None:
        seen.append(params)
        raise RuntimeError("boom")

    message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    assert await local.dispatch(message, make_ctx(), max_batch_size=10) is None
    assert seen == [{"requestId": 1}]
