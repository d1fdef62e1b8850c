"""The 2026-07-28 (stateless) era at the wire, through the real router and consumer.

Every request here is built the way a conformant client builds it (the seed harness's shape): the body's
``params._meta`` carries the envelope (``io.modelcontextprotocol/protocolVersion``, ``…/clientCapabilities`` and,
usually, ``…/clientInfo``), and the routing headers ``MCP-Protocol-Version``, ``Mcp-Method`` and (for
``tools/call`` and the task methods) ``Mcp-Name`` mirror the body. Each test then breaks one rule, or exercises
one feature, and asserts the status, the headers and the JSON-RPC code against ``mcp_app.protocol.errors``.

Covered: the transport rules (POST only on a modern-only server, no sessions, Origin), the validation ladder
(envelope -32602, headers -32020, version -32022), unknown and removed methods (404/-32601), ``server/discover``,
result decoration and cache hints, ``tools/call`` errors, ``x-mcp-header``, progress and log notifications on the
request's own stream, ``subscriptions/listen``, multi-round-trip requests with signed ``requestState``, tasks
gating, and that handshake-era traffic never sees the stateless-only codes.

No response in this module may carry ``Mcp-Session-Id``: ``send`` and ``open_stream`` assert it on every one.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

import tests.tools
from mcp_app.models import ServerTool
from mcp_app.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from tests.conftest import Access
from tests.helpers import (
    ABSENT,
    CLIENT_INFO,
    MODERN,
    TASKS,
    Reply,
    assert_no_session,
    call,
    close_stream,
    communicator,
    envelope,
    error_of,
    modern_body,
    modern_call,
    open_stream,
    result_of,
    routing_headers,
    rpc,
    send,
    sse_data,
)
from tests.helpers import modern_call_tool as call_tool

HANDSHAKE_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
MODERN_ONLY_CODES = {HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION}
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


@pytest.fixture
def executions() -> list:
    tests.tools.executions.clear()
    return tests.tools.executions


@pytest.fixture
async def modern_only(make_access: Any) -> Any:
    return await make_access(tools=("echo", "record"), protocol_versions=[MODERN])


@pytest.fixture
async def agent_access(orm: Any, agent_factory: Any, token_factory: Any) -> Any:
    """Another agent of the same tenant, with a token for the given server."""

    async def make(access: Any) -> Access:
        agent = await orm(agent_factory, tenant=access.tenant)
        token, raw = await orm(token_factory, agent=agent, servers=[access.server])
        return Access(tenant=access.tenant, server=access.server, agent=agent, token=token, raw_token=raw)

    return make


# --------------------------------------------------------------------------------------------- transport


async def test_get_and_delete_on_a_modern_only_server_are_405(modern_only):
    for method, accept in (("GET", "text/event-stream"), ("GET", "application/json"), ("DELETE", "*/*")):
        reply = await send(modern_only, method=method, headers={"accept": accept})
        assert reply.status == 405, (method, reply.body)
        assert reply.headers["allow"] == "POST"


async def test_a_dual_era_server_still_serves_get_and_delete(access):
    info = await send(access, method="GET", headers={"accept": "application/json"})
    assert info.status == 200
    assert info.json()["transport"] == "streamable-http"
    comm = communicator(access, method="GET", headers={"accept": "text/event-stream"})
    await comm.send_input({"type": "http.request", "body": b""})
    start = await comm.receive_output(timeout=5)
    ready = await comm.receive_output(timeout=5)
    await close_stream(comm)
    assert start["status"] == 200
    assert_no_session({key.decode().lower(): value.decode() for key, value in start["headers"]})
    assert ready["body"] == b": ready\n\n"
    assert (await send(access, method="DELETE")).status == 204


async def test_session_and_last_event_id_headers_are_ignored_not_refused(access, modern_only):
    for target in (access, modern_only):
        reply = await modern_call(
            target, "tools/list", headers_override={"mcp-session-id": "abc123", "last-event-id": "17"}
        )
        result = result_of(reply)
        assert [tool["name"] for tool in result["tools"]][:1] == ["echo"]


async def test_a_foreign_origin_is_refused_before_the_tool_runs(modern_only, executions):
    arguments = {"kind": "alpha"}
    refused = await call_tool(modern_only, "record", arguments, headers_override={"origin": "https://evil.example"})
    assert refused.status == 403
    assert "result" not in refused.json()
    assert executions == []
    # The same call without the foreign Origin does run: the refusal above is the Origin's doing.
    assert result_of(await call_tool(modern_only, "record", arguments))["content"][0]["text"] == "alpha x1"
    assert executions == [("record", {"kind": "alpha", "count": 1})]


async def test_an_accepted_notification_is_202_with_no_body(access):
    body = rpc("notifications/cancelled", {"_meta": envelope(), "requestId": 1}, id=None)
    reply = await send(access, body, headers=routing_headers(body))
    assert reply.status == 202
    assert reply.body == b""


# --------------------------------------------------------------------------------------------- routing headers


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"mcp-name": "echo"}, "Mcp-Name names another tool"),
        ({"mcp-name": "RECORD"}, "header values are case-sensitive"),
        ({"mcp-name": None}, "Mcp-Name is required for tools/call"),
        ({"mcp-method": None}, "Mcp-Method is required"),
        ({"mcp-method": "tools/list"}, "Mcp-Method differs from the body"),
        ({"mcp-protocol-version": None}, "MCP-Protocol-Version is required"),
        ({"mcp-protocol-version": "2025-11-25"}, "MCP-Protocol-Version differs from _meta"),
        ({"mcp-name": "=?base64?ZWNobw==?="}, "a sentinel whose decoded value names another tool"),
        ({"mcp-name": "=?base64?not base64!?="}, "a sentinel that is not valid base64"),
        ({"mcp-name": "=?base64?//79?="}, "a sentinel that is not UTF-8"),
    ],
)
async def test_a_missing_or_mismatched_routing_header_is_400_and_header_mismatch(
    modern_only, executions, override, why
):
    reply = await call_tool(modern_only, "record", {"kind": "alpha"}, headers_override=override)
    error_of(reply, 400, HEADER_MISMATCH)
    assert executions == [], why


async def test_a_base64_sentinel_is_decoded_before_comparison(modern_only, executions):
    sentinel = "=?base64?" + base64.b64encode(b"record").decode() + "?="
    reply = await call_tool(modern_only, "record", {"kind": "beta"}, headers_override={"mcp-name": sentinel})
    assert result_of(reply)["content"][0]["text"] == "beta x1"
    assert executions == [("record", {"kind": "beta", "count": 1})]


async def test_mcp_name_on_a_task_method_must_equal_the_task_id(access):
    declared = {"extensions": {TASKS: {}}}
    mismatch = await modern_call(
        access,
        "tasks/get",
        {"taskId": "some-task"},
        capabilities=declared,
        headers_override={"mcp-name": "a-different-task"},
    )
    error_of(mismatch, 400, HEADER_MISMATCH)
    missing = await modern_call(
        access, "tasks/get", {"taskId": "some-task"}, capabilities=declared, headers_override={"mcp-name": None}
    )
    error_of(missing, 400, HEADER_MISMATCH)
    matching = await modern_call(access, "tasks/get", {"taskId": "some-task"}, capabilities=declared)
    error_of(matching, 400, INVALID_PARAMS)


# --------------------------------------------------------------------------------------------- envelope & version


async def test_a_version_header_with_an_incomplete_envelope_is_400_invalid_params(access):
    # The body names the version but not the client capabilities.
    reply = await modern_call(access, "tools/list", capabilities=ABSENT)
    error_of(reply, 400, INVALID_PARAMS)
    # A body without the envelope's version key is modern only by its header, and still incomplete.
    reply = await modern_call(access, "tools/list", version=ABSENT, headers_override={"mcp-protocol-version": MODERN})
    error_of(reply, 400, INVALID_PARAMS)
    # Capabilities must be an object ({} is fine, a string is not).
    reply = await modern_call(access, "tools/list", capabilities="all of them")
    error_of(reply, 400, INVALID_PARAMS)


async def test_client_info_is_optional(access):
    result = result_of(await modern_call(access, "tools/list", client_info=ABSENT))
    assert result["resultType"] == "complete"
    assert isinstance(result["tools"], list)


async def test_an_unsupported_version_is_400_with_the_supported_list(access):
    reply = await modern_call(access, "tools/list", version="2025-06-18")
    error = error_of(reply, 400, UNSUPPORTED_PROTOCOL_VERSION)
    assert error["data"]["requested"] == "2025-06-18"
    assert error["data"]["supported"][0] == MODERN
    assert set(error["data"]["supported"]) == {MODERN, *HANDSHAKE_VERSIONS}

    future = await modern_call(access, "tools/list", version="2099-01-01")
    assert error_of(future, 400, UNSUPPORTED_PROTOCOL_VERSION)["data"]["requested"] == "2099-01-01"


async def test_a_legacy_only_server_answers_a_valid_modern_request_with_unsupported_version(make_access):
    legacy_only = await make_access(protocol_versions=HANDSHAKE_VERSIONS)
    error = error_of(await modern_call(legacy_only, "server/discover"), 400, UNSUPPORTED_PROTOCOL_VERSION)
    assert error["data"]["requested"] == MODERN
    assert sorted(error["data"]["supported"]) == HANDSHAKE_VERSIONS
    assert error["data"]["supported"][0] == "2025-11-25"


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("no/such/method", {}),
        ("initialize", {"protocolVersion": MODERN, "capabilities": {}, "clientInfo": CLIENT_INFO}),
        ("ping", {}),
        ("logging/setLevel", {"level": "info"}),
        ("resources/subscribe", {"uri": "file:///x"}),
        ("resources/unsubscribe", {"uri": "file:///x"}),
        ("tasks/list", {}),
    ],
)
async def test_unknown_and_removed_methods_are_404_method_not_found(access, method, params):
    reply = await modern_call(access, method, params, capabilities={"extensions": {TASKS: {}}})
    error_of(reply, 404, METHOD_NOT_FOUND)


# --------------------------------------------------------------------------------------------- discovery & results


async def test_server_discover_describes_the_server_with_cache_hints(make_access):
    access = await make_access(instructions="Use echo to repeat text.", protocol_versions=[MODERN])
    for capabilities in ({}, {"extensions": {TASKS: {}}}):
        reply = await modern_call(access, "server/discover", capabilities=capabilities)
        assert reply.content_type == "application/json"
        result = result_of(reply)
        assert result["resultType"] == "complete"
        assert result["supportedVersions"] == [MODERN]
        assert isinstance(result["capabilities"]["tools"], dict)
        # Extensions are advertised to the clients that declare them, and to no one else.
        assert result["capabilities"].get("extensions") == (capabilities.get("extensions") or None)
        assert result["instructions"] == "Use echo to repeat text."
        assert isinstance(result["ttlMs"], int) and not isinstance(result["ttlMs"], bool)
        assert result["ttlMs"] >= 0
        assert result["cacheScope"] == "private"
        assert result["_meta"][SERVER_INFO]["name"] == "mcp-host"


async def test_server_discover_on_a_dual_era_server_lists_the_modern_version_first(access):
    result = result_of(await modern_call(access, "server/discover"))
    assert result["supportedVersions"][0] == MODERN
    assert set(result["supportedVersions"]) == {MODERN, *HANDSHAKE_VERSIONS}


async def test_tools_list_is_cacheable_deterministic_and_follows_the_bindings(make_access, orm):
    access = await make_access(tools=("get_time", "record", "echo", "add"))
    first = result_of(await modern_call(access, "tools/list"))
    second = result_of(await modern_call(access, "tools/list"))
    assert [tool["name"] for tool in first["tools"]] == ["get_time", "record", "echo", "add"]
    assert first["tools"] == second["tools"]
    assert first["resultType"] == "complete"
    assert isinstance(first["ttlMs"], int) and first["ttlMs"] >= 0
    assert first["cacheScope"] == "private"
    assert first["_meta"][SERVER_INFO]["name"] == "mcp-host"

    binding = await orm(ServerTool.objects.get, server=access.server, tool__name="get_time")
    binding.position = 9
    await orm(binding.save)
    moved = result_of(await modern_call(access, "tools/list"))
    assert [tool["name"] for tool in moved["tools"]] == ["record", "echo", "add", "get_time"]


async def test_tools_call_results_carry_result_type_but_no_cache_hints(access):
    result = result_of(await call_tool(access, "echo", {"text": "hi"}))
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert result["resultType"] == "complete"
    assert result["_meta"][SERVER_INFO]["name"] == "mcp-host"
    assert "ttlMs" not in result
    assert "cacheScope" not in result


# --------------------------------------------------------------------------------------------- tools/call


async def test_an_unknown_tool_is_400_invalid_params(access):
    error_of(await call_tool(access, "delete_everything", {}), 400, INVALID_PARAMS)


@pytest.mark.parametrize(
    "arguments",
    [
        {"kind": "alpha", "colour": "red"},  # unknown property under the closed schema
        {"kind": "gamma"},  # outside the enum
        {"kind": "alpha", "count": "three"},  # wrong type
        {"kind": "alpha", "count": "3"},  # a numeric string is still not a JSON Schema integer
        {"kind": "alpha", "count": 2.5},  # not an integer
        {},  # required argument missing
    ],
)
async def test_arguments_outside_the_schema_are_400_and_the_tool_does_not_run(
    access, orm, tool_factory, executions, arguments
):
    await orm(tool_factory, access.server, "record", position=10)
    error_of(await call_tool(access, "record", arguments), 400, INVALID_PARAMS)
    assert executions == []


@pytest.mark.parametrize("value", ["two", "2", True, None])
async def test_add_with_a_non_number_is_400_invalid_params(access, value):
    error_of(await call_tool(access, "add", {"a": value, "b": 1}), 400, INVALID_PARAMS)


async def test_a_tool_error_is_a_200_result_with_human_and_machine_readable_content(make_access):
    access = await make_access(tools=("refuse",), protocol_versions=[MODERN])
    result = result_of(await call_tool(access, "refuse", {"reason": "the vault is closed"}))
    assert result["isError"] is True
    assert result["resultType"] == "complete"
    assert result["content"][0] == {"type": "text", "text": "the vault is closed"}
    assert result["content"][1]["type"] == "text"
    assert orjson.loads(result["content"][1]["text"]) == {
        "code": "TOOL_ERROR",
        "message": "the vault is closed",
        "error_type": "tool_error",
    }


# --------------------------------------------------------------------------------------------- x-mcp-header


@pytest.fixture
async def param_tools(make_access: Any) -> Any:
    return await make_access(tools=("regional", "sharded"), protocol_versions=[MODERN])


async def test_x_mcp_header_annotations_are_published(param_tools):
    tools = {tool["name"]: tool for tool in result_of(await modern_call(param_tools, "tools/list"))["tools"]}
    assert tools["regional"]["inputSchema"]["properties"]["region"]["x-mcp-header"] == "Region"
    assert tools["sharded"]["inputSchema"]["properties"]["shard"]["x-mcp-header"] == "Shard"


@pytest.mark.parametrize(
    ("arguments", "header", "why"),
    [
        ({"region": "eu-west"}, None, "the argument is present but its header is missing"),
        ({"region": "eu-west"}, "us-east", "the header disagrees with the argument"),
        ({"region": "eu-west"}, "EU-WEST", "header values are case-sensitive"),
        ({"note": "no region"}, "eu-west", "the header is present but the argument is absent"),
        ({"region": "eu-west"}, "=?base64?@@@?=", "the header is invalid base64"),
    ],
)
async def test_x_mcp_header_violations_are_400_header_mismatch(param_tools, executions, arguments, header, why):
    override = {"mcp-param-region": header} if header is not None else None
    reply = await call_tool(param_tools, "regional", arguments, headers_override=override)
    error_of(reply, 400, HEADER_MISMATCH)
    assert executions == [], why


async def test_x_mcp_header_matching_values_pass(param_tools, executions):
    reply = await call_tool(
        param_tools, "regional", {"region": "eu-west"}, headers_override={"Mcp-Param-Region": "eu-west"}
    )
    assert result_of(reply)["structuredContent"] == {"region": "eu-west", "note": ""}
    # A value that cannot travel as a plain header uses the base64 form, decoded before comparison.
    encoded = "=?base64?" + base64.b64encode("Zürich".encode()).decode() + "?="
    reply = await call_tool(
        param_tools, "regional", {"region": "Zürich"}, headers_override={"mcp-param-region": encoded}
    )
    assert result_of(reply)["structuredContent"]["region"] == "Zürich"
    # Neither argument nor header: nothing to mirror.
    assert result_of(await call_tool(param_tools, "regional", {"note": "n"}))["structuredContent"]["region"] == ""
    assert [record[1]["region"] for record in executions] == ["eu-west", "Zürich", ""]


async def test_x_mcp_header_integers_compare_numerically(param_tools, executions):
    reply = await call_tool(param_tools, "sharded", {"shard": 7}, headers_override={"mcp-param-shard": "007"})
    assert result_of(reply)["structuredContent"] == {"shard": 7}
    reply = await call_tool(param_tools, "sharded", {"shard": 7}, headers_override={"mcp-param-shard": "8"})
    error_of(reply, 400, HEADER_MISMATCH)
    reply = await call_tool(param_tools, "sharded", {"shard": 7}, headers_override={"mcp-param-shard": "seven"})
    error_of(reply, 400, HEADER_MISMATCH)
    assert executions == [("sharded", {"shard": 7})]


# --------------------------------------------------------------------------------------------- notifications


async def test_progress_rides_on_the_requests_own_sse_response(access):
    params = {"name": "progress_demo", "arguments": {"steps": 3}, "_meta": {"progressToken": "tok-m"}}
    reply = await modern_call(access, "tools/call", params, id="p-1")
    assert reply.status == 200
    assert reply.content_type == "text/event-stream; charset=utf-8"
    assert reply.headers["x-accel-buffering"] == "no"
    messages = reply.sse_messages()
    progress, final = messages[:-1], messages[-1]
    assert [m["method"] for m in progress] == ["notifications/progress"] * 3
    assert [m["params"]["progress"] for m in progress] == [1, 2, 3]
    assert all(m["params"]["progressToken"] == "tok-m" for m in progress)
    assert final["id"] == "p-1"
    assert final["result"]["content"] == [{"type": "text", "text": "Completed 3 steps."}]
    assert final["result"]["resultType"] == "complete"


async def test_without_a_progress_token_the_answer_is_plain_json(access):
    reply = await call_tool(access, "progress_demo", {"steps": 3})
    assert reply.content_type == "application/json"
    assert result_of(reply)["content"][0]["text"] == "Completed 3 steps."


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("warning", ["warning", "error"]),
        ("debug", ["debug", "info", "warning", "error"]),
        ("error", ["error"]),
    ],
)
async def test_log_messages_are_sent_only_at_or_above_the_requested_level(make_access, level, expected):
    access = await make_access(tools=("chatty",), protocol_versions=[MODERN])
    reply = await call_tool(access, "chatty", {}, log_level=level)
    assert reply.status == 200
    assert reply.content_type == "text/event-stream; charset=utf-8"
    messages = reply.sse_messages()
    logs, final = messages[:-1], messages[-1]
    assert all(m["method"] == "notifications/message" for m in logs)
    assert [m["params"]["level"] for m in logs] == expected
    assert all(m["params"]["logger"] == "chatty" for m in logs)
    assert logs[0]["params"]["data"] == f"{expected[0]} message"
    assert final["result"]["content"] == [{"type": "text", "text": "logged"}]


async def test_without_a_log_level_no_log_messages_are_sent(make_access):
    access = await make_access(tools=("chatty",), protocol_versions=[MODERN])
    reply = await call_tool(access, "chatty", {})
    assert reply.content_type == "application/json"
    assert result_of(reply)["content"] == [{"type": "text", "text": "logged"}]


async def test_an_unknown_log_level_is_400_invalid_params(make_access):
    access = await make_access(tools=("chatty",), protocol_versions=[MODERN])
    error_of(await call_tool(access, "chatty", {}, log_level="loud"), 400, INVALID_PARAMS)


# --------------------------------------------------------------------------------------------- subscriptions/listen


def listen_body(notifications: dict[str, Any], id: int | str = "listen-1") -> dict[str, Any]:
    return modern_body("subscriptions/listen", {"notifications": notifications}, id=id)


async def test_listen_acknowledges_the_supported_subset_then_forwards_catalog_edits(access, make_access, orm):
    other = await make_access()
    requested = {"toolsListChanged": True, "promptsListChanged": True, "futureThingsChanged": True}
    comm = await open_stream(access, listen_body(requested))
    ack = sse_data(await comm.receive_output(timeout=5))
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert "id" not in ack
    # Every server advertises tools and prompts listChanged: both are acknowledged, a filter it does not know
    # is not.
    assert ack["params"]["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}
    assert ack["params"]["_meta"][SUBSCRIPTION_ID] == "listen-1"

    # Another server's catalog edit first, then this server's: only the latter may reach this stream.
    foreign = await orm(ServerTool.objects.filter(server=other.server).first)
    await orm(foreign.save)
    own = await orm(ServerTool.objects.get, server=access.server, tool__name="echo")
    own.enabled = False
    await orm(own.save)
    frame = await comm.receive_output(timeout=5)
    quiet = await comm.receive_nothing(timeout=0.1)
    await close_stream(comm)
    assert frame["more_body"] is True
    changed = sse_data(frame)
    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"][SUBSCRIPTION_ID] == "listen-1"
    assert quiet, "an edit of another server's catalog must not reach this subscription"
    names = [tool["name"] for tool in result_of(await modern_call(access, "tools/list"))["tools"]]
    assert "echo" not in names


async def test_listen_forwards_only_what_the_client_asked_for(access, orm):
    comm = await open_stream(access, listen_body({"toolsListChanged": False, "futureThingsChanged": True}, id=42))
    ack = sse_data(await comm.receive_output(timeout=5))
    assert ack["params"]["notifications"] == {}
    assert ack["params"]["_meta"][SUBSCRIPTION_ID] == 42
    binding = await orm(ServerTool.objects.filter(server=access.server).first)
    await orm(binding.save)
    quiet = await comm.receive_nothing(timeout=0.2)
    await close_stream(comm)
    assert quiet, "servers must not send notification types the client did not request"


async def test_listen_without_a_notifications_object_is_400_invalid_params(access):
    error_of(await modern_call(access, "subscriptions/listen", {}), 400, INVALID_PARAMS)


# --------------------------------------------------------------------------------------------- multi-round trips


ELICITING = {"elicitation": {}}
ANSWER = {"confirm": {"action": "accept", "content": {"ok": True}}}


@pytest.fixture
async def mrtr(make_access: Any) -> Any:
    return await make_access(tools=("confirm_action", "whoami"), protocol_versions=[MODERN])


async def first_round(access: Any) -> dict[str, Any]:
    result = result_of(await call_tool(access, "confirm_action", {"action": "deploy"}, capabilities=ELICITING))
    assert result["resultType"] == "input_required"
    return result


async def retry(access: Any, state: str, *, tool: str = "confirm_action", arguments: Any = None) -> Reply:
    params = {
        "name": tool,
        "arguments": {"action": "deploy"} if arguments is None else arguments,
        "inputResponses": ANSWER,
        "requestState": state,
    }
    return await modern_call(access, "tools/call", params, capabilities=ELICITING)


async def test_input_required_then_retry_completes_with_the_tools_state(mrtr):
    first = await first_round(mrtr)
    assert first["inputRequests"] == {"confirm": tests.tools.CONFIRM_REQUEST}
    assert isinstance(first["requestState"], str) and first["requestState"]
    assert "ttlMs" not in first

    done = result_of(await retry(mrtr, first["requestState"]))
    assert done["resultType"] == "complete"
    assert done["content"] == [{"type": "text", "text": "confirmed"}]
    assert done["structuredContent"] == {
        "state": {"action": "deploy", "round": 1},
        "inputResponses": ANSWER,
        "action": "deploy",
    }


async def test_input_required_without_the_client_capability_is_400_missing_capability(mrtr):
    reply = await call_tool(mrtr, "confirm_action", {"action": "deploy"}, capabilities={"sampling": {}})
    error = error_of(reply, 400, MISSING_REQUIRED_CLIENT_CAPABILITY)
    assert error["data"]["requiredCapabilities"] == {"elicitation": {}}


async def test_a_tampered_request_state_is_400_invalid_params(mrtr):
    state = (await first_round(mrtr))["requestState"]
    tampered = state[:-1] + ("A" if state[-1] != "A" else "B")
    error_of(await retry(mrtr, tampered), 400, INVALID_PARAMS)
    error_of(await retry(mrtr, "not-a-state"), 400, INVALID_PARAMS)
    # The genuine state still works afterwards.
    assert result_of(await retry(mrtr, state))["resultType"] == "complete"


async def test_request_state_is_bound_to_the_tool_the_agent_and_the_server(mrtr, make_access, agent_access):
    state = (await first_round(mrtr))["requestState"]
    # Another tool of the same server.
    error_of(await retry(mrtr, state, tool="whoami", arguments={}), 400, INVALID_PARAMS)
    # Another agent of the same tenant, calling the same tool on the same server.
    colleague = await agent_access(mrtr)
    assert (await first_round(colleague))["requestState"] != state
    error_of(await retry(colleague, state), 400, INVALID_PARAMS)
    # The same tool on another server.
    elsewhere = await make_access(tools=("confirm_action",), protocol_versions=[MODERN])
    error_of(await retry(elsewhere, state), 400, INVALID_PARAMS)
    # The agent it was minted for can still use it.
    assert result_of(await retry(mrtr, state))["resultType"] == "complete"


# --------------------------------------------------------------------------------------------- tasks gating


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_task_methods_need_the_extension_and_unknown_ids_are_invalid_params(access, method):
    params = (
        {"taskId": "no-such-task", "inputResponses": {}} if method == "tasks/update" else {"taskId": "no-such-task"}
    )
    undeclared = await modern_call(access, method, params)
    error = error_of(undeclared, 400, MISSING_REQUIRED_CLIENT_CAPABILITY)
    assert error["data"]["requiredCapabilities"] == {"extensions": {TASKS: {}}}

    other_extension = await modern_call(access, method, params, capabilities={"extensions": {"example.com/x": {}}})
    error_of(other_extension, 400, MISSING_REQUIRED_CLIENT_CAPABILITY)

    declared = await modern_call(access, method, params, capabilities={"extensions": {TASKS: {}}})
    error_of(declared, 400, INVALID_PARAMS)


# --------------------------------------------------------------------------------------------- handshake-era traffic


async def test_a_modern_only_server_refuses_legacy_initialize_naming_its_versions(modern_only):
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT_INFO}
    for headers in ({}, {"mcp-protocol-version": "2025-06-18"}):
        reply = await send(modern_only, rpc("initialize", params, id=7), headers=headers)
        error = error_of(reply, 400, INVALID_PARAMS)
        assert error["code"] not in MODERN_ONLY_CODES
        assert error["data"]["supported"] == [MODERN]
        assert reply.json()["id"] == 7


async def test_a_modern_only_server_refuses_legacy_requests_as_invalid_request(modern_only, executions):
    reply = await send(modern_only, rpc("tools/list", id=8))
    error = error_of(reply, 400, INVALID_REQUEST)
    assert error["data"]["supported"] == [MODERN]
    reply = await send(modern_only, rpc("tools/call", {"name": "record", "arguments": {"kind": "alpha"}}, id=9))
    error_of(reply, 400, INVALID_REQUEST)
    assert executions == []


async def test_legacy_traffic_on_a_dual_era_server_never_sees_stateless_codes(access):
    # Routing headers mean nothing to the handshake era: a mismatched Mcp-Name is not checked.
    reply = await send(
        access,
        rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
        headers={"mcp-name": "something-else", "mcp-method": "ping"},
    )
    assert reply.status == 200
    assert reply.json()["result"]["content"] == [{"type": "text", "text": "x"}]
    # An unsupported handshake-era version header is a plain 400.
    reply = await send(access, rpc("tools/list"), headers={"mcp-protocol-version": "2024-01-01"})
    error = error_of(reply, 400, INVALID_REQUEST)
    assert error["code"] not in MODERN_ONLY_CODES
    # The same server answers a handshake-era initialize normally, opening a session (that era has them).
    initialize = rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT_INFO})
    reply = await call(access, initialize)
    assert reply.headers["mcp-session-id"]
    result = reply.json()["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert "resultType" not in result
