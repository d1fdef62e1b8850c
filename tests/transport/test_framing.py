"""Seed 000 at the wire: body limits, parse errors, notifications, batches, content types."""

from __future__ import annotations

import orjson
import pytest
from django.test import override_settings

from mcp_app.protocol.errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from tests.helpers import call, communicator, rpc


async def test_invalid_json_is_parse_error_with_400(access):
    reply = await call(access, raw=b'{"jsonrpc": "2.0", "method": ')
    assert reply.status == 400
    assert reply.content_type == "application/json"
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": PARSE_ERROR, "message": reply.json()["error"]["message"]},
    }


@pytest.mark.parametrize("raw", [b"NaN", b'{"a": 1} trailing', b"\xff\xfe{}"])
async def test_non_strict_json_is_rejected(access, raw):
    reply = await call(access, raw=raw)
    assert reply.status == 400
    assert reply.json()["error"]["code"] == PARSE_ERROR


@pytest.mark.parametrize("raw", [b"", b"  \n"])
async def test_empty_body_is_400(access, raw):
    reply = await call(access, raw=raw)
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST


async def test_body_over_default_limit_of_4_mib_is_400_invalid_request(access):
    text = "x" * (4 * 1024 * 1024)
    reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": text}}))
    assert reply.status == 400  # seed 000's contract
    assert reply.json()["error"]["code"] == INVALID_REQUEST
    assert "exceeds 4194304 bytes" in reply.json()["error"]["message"]


async def test_body_just_under_limit_is_served(access):
    overhead = len(orjson.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": ""}})))
    text = "x" * (4 * 1024 * 1024 - overhead)
    reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": text}}), timeout=20)
    assert reply.status == 200
    assert reply.json()["result"]["content"][0]["text"] == text


async def test_chunked_body_is_refused_as_soon_as_it_passes_the_limit(access):
    with override_settings(MCP_APP={"MAX_BODY_BYTES": 100}):
        comm = communicator(access, drop=("content-length",))
        await comm.send_input({"type": "http.request", "body": b"{" + b" " * 60, "more_body": True})
        await comm.send_input({"type": "http.request", "body": b" " * 60, "more_body": True})
        start = await comm.receive_output(timeout=5)
        body = await comm.receive_output(timeout=5)
        await comm.wait(timeout=5)
    assert start["status"] == 400
    assert orjson.loads(body["body"])["error"]["code"] == INVALID_REQUEST


async def test_declared_content_length_over_limit_is_refused_before_reading(access):
    with override_settings(MCP_APP={"MAX_BODY_BYTES": 100}):
        comm = communicator(access, headers={"content-length": "5000"})
        await comm.send_input({"type": "http.request", "body": b"{", "more_body": True})
        start = await comm.receive_output(timeout=5)
        await comm.receive_output(timeout=5)
        await comm.wait(timeout=5)
    assert start["status"] == 400


async def test_notification_is_202_without_body(access):
    reply = await call(access, rpc("notifications/initialized", id=None))
    assert reply.status == 202
    assert reply.body == b""
    assert "content-type" not in reply.headers


async def test_unknown_notification_is_also_202(access):
    reply = await call(access, rpc("notifications/whatever", {"x": 1}, id=None))
    assert reply.status == 202


async def test_client_response_is_accepted_with_202(access):
    reply = await call(access, {"jsonrpc": "2.0", "id": 7, "result": {}})
    assert reply.status == 202


async def test_batch_returns_array_of_responses_in_order(access):
    batch = [
        rpc("ping", id=1),
        rpc("tools/call", {"name": "echo", "arguments": {"text": "b"}}, id=2),
        rpc("nope", id=3),
    ]
    reply = await call(access, batch)
    assert reply.status == 200
    assert reply.content_type == "application/json"
    body = reply.json()
    assert [item["id"] for item in body] == [1, 2, 3]
    assert body[0]["result"] == {}
    assert body[1]["result"]["content"] == [{"type": "text", "text": "b"}]
    assert body[2]["error"]["code"] == METHOD_NOT_FOUND


async def test_mixed_batch_answers_only_requests(access):
    batch = [
        rpc("notifications/initialized", id=None),
        rpc("ping", id="a"),
        rpc("notifications/cancelled", {}, id=None),
    ]
    reply = await call(access, batch)
    assert reply.status == 200
    assert reply.json() == [{"jsonrpc": "2.0", "id": "a", "result": {}}]


async def test_batch_of_only_notifications_is_202(access):
    reply = await call(access, [rpc("notifications/initialized", id=None), rpc("notifications/initialized", id=None)])
    assert reply.status == 202
    assert reply.body == b""


async def test_batch_with_invalid_member_answers_it_with_invalid_request(access):
    reply = await call(access, [rpc("ping", id=1), {"jsonrpc": "1.0", "id": 2, "method": "ping"}, 5])
    body = reply.json()
    assert body[0]["result"] == {}
    assert body[1] == {"jsonrpc": "2.0", "id": 2, "error": body[1]["error"]}
    assert body[1]["error"]["code"] == INVALID_REQUEST
    assert body[2]["id"] is None and body[2]["error"]["code"] == INVALID_REQUEST


async def test_empty_batch_is_invalid_request(access):
    reply = await call(access, [])
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST


async def test_batch_size_is_bounded_by_setting(access):
    with override_settings(MCP_APP={"MAX_BATCH_SIZE": 3}):
        ok = await call(access, [rpc("ping", id=i) for i in range(3)])
        too_many = await call(access, [rpc("ping", id=i) for i in range(4)])
    assert ok.status == 200 and len(ok.json()) == 3
    assert too_many.status == 400
    assert too_many.json()["error"]["code"] == INVALID_REQUEST


async def test_batches_are_refused_where_the_revision_removed_them(access):
    reply = await call(access, [rpc("ping", id=1)], headers={"mcp-protocol-version": "2025-06-18"})
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST


async def test_unsupported_protocol_version_header_is_400(access):
    reply = await call(access, rpc("ping"), headers={"mcp-protocol-version": "2023-01-01"})
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST


async def test_params_that_are_not_an_object_are_invalid_params(access):
    reply = await call(access, {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1, 2]})
    assert reply.status == 200
    assert reply.json()["error"]["code"] == INVALID_PARAMS


async def test_request_with_null_id_is_invalid_request(access):
    reply = await call(access, {"jsonrpc": "2.0", "id": None, "method": "ping"})
    assert reply.status == 400
    assert reply.json()["error"]["code"] == INVALID_REQUEST


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
async def test_non_json_content_type_is_415(access, content_type):
    reply = await call(access, rpc("ping"), headers={"content-type": content_type})
    assert reply.status == 415


async def test_json_content_type_with_charset_is_accepted(access):
    reply = await call(access, rpc("ping"), headers={"content-type": "application/json; charset=utf-8"})
    assert reply.status == 200
