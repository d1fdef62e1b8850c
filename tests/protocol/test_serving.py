"""``protocol.serving``: one body in, one ``Answer`` out, per era, without Django or a transport.

A recording ``Exchange`` stands in for the edge: it builds a plain ``RequestContext`` and notes each route the
protocol asks a context for, so the tests see what was decided before dispatch (era, version, request id) and
what came back (status, payload, session to open). Expected statuses and codes are the spec's (§2.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from mcp_app.protocol import serving
from mcp_app.protocol.context import RequestContext
from mcp_app.protocol.descriptors import ServerCatalog, ServerDescription
from mcp_app.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_app.protocol.ports import NO_CHANNEL

from .fakes import TOOLS, FakeRunner

BOTH = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
MODERN_ONLY = ("2026-07-28",)


@dataclass
class FakeSession:
    key: str = "k" * 32
    protocol_version: str = "2025-11-25"
    log_level: str | None = None
    subscriptions: frozenset[str] = frozenset()
    client_capabilities: dict[str, Any] = field(default_factory=dict)

    async def set_log_level(self, level: str) -> None: ...

    async def subscribe(self, uri: str) -> None: ...

    async def unsubscribe(self, uri: str) -> None: ...


@dataclass
class RecordingExchange:
    routes: list[serving.Route] = field(default_factory=list)
    demands: list[serving.Demand] = field(default_factory=list)

    limited: serving.Refusal | None = None  # what admit answers

    async def admit(self, demand: serving.Demand) -> serving.Refusal | None:
        self.demands.append(demand)
        return self.limited

    def context(self, route: serving.Route, **fields: Any) -> RequestContext:
        self.routes.append(route)
        return RequestContext(
            server=ServerDescription(server_id="srv", name="srv"),
            catalog=ServerCatalog(tools=TOOLS),
            runner=FakeRunner(),
            protocol_version=route.protocol_version,
            era=route.era,
            **fields,
        )


def post(
    headers: dict[str, str] | None = None,
    *,
    versions: tuple[str, ...] = BOTH,
    session: FakeSession | None = None,
    named: bool = False,
    required: bool = False,
) -> serving.PostRequest:
    return serving.PostRequest(
        headers=headers or {},
        supported_versions=versions,
        max_depth=64,
        max_batch_size=10,
        max_client_info_bytes=4096,
        sessions_required=required,
        session_named=named or session is not None,
        session=session,
    )


def body(method: str, params: dict[str, Any] | None = None, *, id: Any = 1) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        message["id"] = id
    if params is not None:
        message["params"] = params
    return orjson.dumps(message)


def modern_meta(version: str = "2026-07-28") -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
    }


def modern_headers(method: str, name: str | None = None, version: str = "2026-07-28") -> dict[str, str]:
    headers = {"mcp-protocol-version": version, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


async def test_an_undecodable_body_is_400_parse_error_and_routes_nowhere() -> None:
    exchange = RecordingExchange()
    answer = await serving.serve_post(b"{not json", post(), exchange)
    assert (answer.status, answer.payload["error"]["code"]) == (400, PARSE_ERROR)
    assert answer.payload["id"] is None
    assert exchange.routes == [] and exchange.demands == []


async def test_a_session_request_with_another_supported_version_header_is_served_under_the_session_version() -> None:
    exchange = RecordingExchange()
    request = post({"mcp-protocol-version": "2025-03-26"}, session=FakeSession(protocol_version="2025-11-25"))
    answer = await serving.serve_post(body("ping"), request, exchange)
    assert answer.status == 200
    assert answer.payload == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert [demand.era for demand in exchange.demands] == ["legacy"]
    assert exchange.routes == [serving.Route("legacy", "2025-11-25", 1)]


async def test_an_unsupported_version_header_is_400_before_any_context() -> None:
    exchange = RecordingExchange()
    answer = await serving.serve_post(body("ping"), post({"mcp-protocol-version": "2024-01-01"}), exchange)
    assert (answer.status, answer.payload["error"]["code"]) == (400, INVALID_REQUEST)
    assert exchange.routes == []


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (post(named=True), 404),  # an unknown or expired session: 404 (MUST)
        (post(required=True), 400),  # a server that requires sessions, none named: 400
    ],
)
async def test_session_rules_of_the_handshake_era(request_: serving.PostRequest, status: int) -> None:
    exchange = RecordingExchange()
    answer = await serving.serve_post(body("tools/list"), request_, exchange)
    assert answer.status == status
    assert answer.payload["error"]["code"] == INVALID_REQUEST
    assert exchange.routes == []


async def test_initialize_asks_the_edge_for_a_session_with_the_negotiated_version() -> None:
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}
    answer = await serving.serve_post(body("initialize", params), post(named=True), RecordingExchange())
    assert answer.status == 200
    assert answer.new_session is not None
    assert answer.new_session.protocol_version == "2025-06-18"
    assert answer.new_session.params == params


async def test_a_notification_owes_no_answer_in_either_era() -> None:
    legacy = await serving.serve_post(body("notifications/initialized", id=None), post(), RecordingExchange())
    modern = await serving.serve_post(
        body("notifications/x", {"_meta": modern_meta()}, id=None), post(), RecordingExchange()
    )
    assert (legacy.status, legacy.payload) == (200, None)  # the edge's writer answers 202 for "nothing owed"
    assert (modern.status, modern.payload) == (202, None)


async def test_a_modern_only_server_refuses_handshake_traffic_naming_its_versions() -> None:
    answer = await serving.serve_post(body("tools/list"), post(versions=MODERN_ONLY), RecordingExchange())
    assert answer.status == 400
    assert answer.payload["error"]["code"] == INVALID_REQUEST
    assert answer.payload["error"]["data"] == {"supported": ["2026-07-28"]}
    init = await serving.serve_post(
        body("initialize", {"protocolVersion": "2025-11-25"}), post(versions=MODERN_ONLY), RecordingExchange()
    )
    assert (init.status, init.payload["error"]["code"]) == (400, INVALID_PARAMS)
    assert init.payload["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2025-11-25"}


@pytest.mark.parametrize(
    ("message", "headers", "status", "code"),
    [
        # header ≠ body: 400 + -32020
        (body("tools/list", {"_meta": modern_meta()}), modern_headers("tools/call"), 400, HEADER_MISMATCH),
        # missing required _meta keys: 400 + -32602
        (
            body("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
            modern_headers("tools/list"),
            400,
            INVALID_PARAMS,
        ),
        # an unknown method: 404 + -32601
        (body("no/such", {"_meta": modern_meta()}), modern_headers("no/such"), 404, METHOD_NOT_FOUND),
    ],
)
async def test_the_stateless_ladder_and_dispatch_answer_with_the_spec_status(
    message: bytes, headers: dict[str, str], status: int, code: int
) -> None:
    answer = await serving.serve_post(message, post(headers), RecordingExchange())
    assert (answer.status, answer.payload["error"]["code"]) == (status, code)


async def test_an_unsupported_modern_version_is_400_with_supported_and_requested() -> None:
    message = body("tools/list", {"_meta": modern_meta("2027-01-01")})
    answer = await serving.serve_post(
        message, post(modern_headers("tools/list", version="2027-01-01")), RecordingExchange()
    )
    assert answer.status == 400
    assert answer.payload["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert answer.payload["error"]["data"]["requested"] == "2027-01-01"


async def test_a_modern_request_is_routed_without_a_request_id_and_keeps_no_channel() -> None:
    exchange = RecordingExchange()
    answer = await serving.serve_post(
        body("tools/list", {"_meta": modern_meta()}), post(modern_headers("tools/list")), exchange
    )
    assert answer.status == 200
    assert [tool["name"] for tool in answer.payload["result"]["tools"]] == ["echo", "now"]
    assert exchange.routes == [serving.Route("modern", "2026-07-28", None)]


async def test_no_channel_carries_nothing() -> None:
    assert NO_CHANNEL.can_request is False
    answer = await NO_CHANNEL.request("elicitation/create", {})
    assert answer["error"]["code"] == -32603
    assert await NO_CHANNEL.close_stream() is False
    await NO_CHANNEL.notify({"jsonrpc": "2.0", "method": "notifications/progress"})
    await NO_CHANNEL.deliver(1, {"result": {}})
    await NO_CHANNEL.cancel(1)


@pytest.mark.parametrize("modern", [False, True])
async def test_a_rate_limited_request_is_a_429_with_retry_after_in_both_eras(modern: bool) -> None:
    from mcp_app.protocol.errors import RateLimited

    exchange = RecordingExchange(limited=serving.Refusal(RateLimited("agent", 1500, 2.0, 4), 429, 2))
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
    headers = {"mcp-protocol-version": "2026-07-28" if modern else "2025-06-18"}
    answer = await serving.serve_post(orjson.dumps(message), post(headers), exchange)
    assert (answer.status, answer.headers) == (429, (("retry-after", "2"),))
    assert answer.payload["id"] == 9
    assert answer.payload["error"]["code"] == -32011
    assert answer.payload["error"]["data"] == {"scope": "agent", "retryAfterMs": 1500, "rate": 2.0, "burst": 4}
    assert exchange.routes == []  # never dispatched


async def test_the_demand_names_the_tools_a_body_calls_decoded_once_for_the_edge_limits() -> None:
    """The edge's rate limiter gets the called tools' names from the protocol's one decoding (issue 26)."""
    exchange = RecordingExchange()
    calls = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "now", "_meta": {"progressToken": 7}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": 5}},
    ]
    await serving.serve_post(orjson.dumps(calls), post({"mcp-protocol-version": "2025-06-18"}), exchange)
    [demand] = exchange.demands
    assert (demand.era, demand.messages, demand.tools) == ("legacy", 4, ("echo", "now"))
    assert (demand.request_id, demand.calls, demand.progress) == (None, True, True)
    single = serving.read_demand("modern", {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {}})
    assert (single.messages, single.tools, single.request_id, single.calls, single.progress) == (1, (), 9, True, False)
    assert serving.read_demand("legacy", []).messages == 1
