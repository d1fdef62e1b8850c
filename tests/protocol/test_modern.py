"""The 2026-07-28 request rules of ``mcp_app.protocol.modern``, without a database or a consumer: era detection,
the envelope, the routing headers (with their base64 form), the version check, ``x-mcp-header`` and result
decoration. Errors are asserted by code against ``mcp_app.protocol.errors``; the wire behaviour of the same rules
is ``tests/transport/test_modern.py``."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from mcp_app.protocol import modern, versions
from mcp_app.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNSUPPORTED_PROTOCOL_VERSION,
    ProtocolError,
)

SUPPORTED = (versions.V2025_11_25, versions.V2026_07_28)
SERVER_INFO = {"name": "srv", "version": "1"}


def body(method: str = "tools/list", params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    envelope = {
        modern.META_PROTOCOL_VERSION: versions.V2026_07_28,
        modern.META_CLIENT_CAPABILITIES: {},
        **meta,
    }
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": envelope}}


def headers(method: str = "tools/list", name: str | None = None, version: str = versions.V2026_07_28) -> dict:
    found = {modern.HEADER_PROTOCOL_VERSION: version, modern.HEADER_METHOD: method}
    if name is not None:
        found[modern.HEADER_NAME] = name
    return found


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def code_of(excinfo: pytest.ExceptionInfo[ProtocolError]) -> int:
    return excinfo.value.code


# ------------------------------------------------------------------------------------------ the era


def test_the_envelope_or_a_stateless_version_header_makes_a_request_modern() -> None:
    assert modern.is_modern(body(), None)
    assert modern.is_modern({"jsonrpc": "2.0", "id": 1, "method": "ping"}, versions.V2026_07_28)
    assert not modern.is_modern({"jsonrpc": "2.0", "id": 1, "method": "ping"}, versions.V2025_11_25)
    assert not modern.is_modern({"jsonrpc": "2.0", "id": 1, "method": "ping"}, None)
    assert not modern.is_modern([body()], None), "a batch is never the stateless era's"
    assert modern.envelope_meta({"method": "x", "params": {"_meta": {"progressToken": 1}}}) is None


# ------------------------------------------------------------------------------------- the envelope


def test_an_envelope_is_read_with_its_extensions() -> None:
    tasks = {"extensions": {modern.TASKS_EXTENSION: {}}}
    read = modern.read_envelope(
        body(
            **{
                modern.META_CLIENT_CAPABILITIES: tasks,
                modern.META_CLIENT_INFO: {"name": "c"},
                modern.META_LOG_LEVEL: "info",
            }
        )
    )
    assert read.protocol_version == versions.V2026_07_28
    assert read.client_info == {"name": "c"} and read.log_level == "info"
    assert read.client_capabilities == tasks
    assert "extensions" not in modern.read_envelope(body()).client_capabilities


@pytest.mark.parametrize(
    "meta",
    [
        {modern.META_PROTOCOL_VERSION: ""},
        {modern.META_PROTOCOL_VERSION: 20260728},
        {modern.META_CLIENT_CAPABILITIES: None},
        {modern.META_CLIENT_CAPABILITIES: []},
        {modern.META_CLIENT_INFO: "client"},
        {modern.META_LOG_LEVEL: "verbose"},
    ],
    ids=["empty version", "numeric version", "no capabilities", "list capabilities", "string info", "bad level"],
)
def test_a_broken_envelope_is_invalid_params(meta: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.read_envelope(body(**meta))
    assert code_of(excinfo) == INVALID_PARAMS


def test_a_request_without_params_has_no_envelope() -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.read_envelope({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert code_of(excinfo) == INVALID_PARAMS


# -------------------------------------------------------------------------------- admission, in order


def test_admit_returns_the_envelope_of_a_conformant_request() -> None:
    call = body("tools/call", {"name": "echo"})
    assert modern.admit(call, headers("tools/call", "echo"), SUPPORTED).protocol_version == versions.V2026_07_28


@pytest.mark.parametrize("payload", [[body()], {"jsonrpc": "2.0", "id": 1, "result": {}}])
def test_a_batch_or_a_body_without_a_method_is_an_invalid_request(payload: Any) -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(payload, headers(), SUPPORTED)
    assert code_of(excinfo) == INVALID_REQUEST


def test_the_envelope_is_checked_before_the_headers_and_the_headers_before_the_version() -> None:
    broken_envelope = body(**{modern.META_CLIENT_CAPABILITIES: None, modern.META_PROTOCOL_VERSION: "1999-01-01"})
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(broken_envelope, {}, SUPPORTED)
    assert code_of(excinfo) == INVALID_PARAMS
    unknown_version = body(**{modern.META_PROTOCOL_VERSION: "1999-01-01"})
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(unknown_version, {}, SUPPORTED)
    assert code_of(excinfo) == HEADER_MISMATCH
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(unknown_version, headers(version="1999-01-01"), SUPPORTED)
    assert code_of(excinfo) == UNSUPPORTED_PROTOCOL_VERSION
    assert excinfo.value.data == {"requested": "1999-01-01", "supported": [versions.V2026_07_28, versions.V2025_11_25]}


def test_a_server_without_a_modern_version_refuses_the_stateless_era() -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(body(), headers(), (versions.V2025_11_25,))
    assert code_of(excinfo) == UNSUPPORTED_PROTOCOL_VERSION


# ------------------------------------------------------------------------------------ routing headers


@pytest.mark.parametrize(
    "sent",
    [
        {modern.HEADER_METHOD: "tools/call"},
        {modern.HEADER_PROTOCOL_VERSION: versions.V2026_07_28},
        headers("tools/list", "echo"),
        headers("tools/call", "other"),
        headers("tools/call"),
    ],
    ids=["no version", "no method", "method differs", "name differs", "no name"],
)
def test_a_missing_or_different_routing_header_is_a_header_mismatch(sent: dict[str, str]) -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(body("tools/call", {"name": "echo"}), sent, SUPPORTED)
    assert code_of(excinfo) == HEADER_MISMATCH


@pytest.mark.parametrize(("method", "field"), sorted(modern.NAME_FIELDS.items()))
def test_each_routed_method_mirrors_its_field_in_mcp_name(method: str, field: str) -> None:
    call = body(method, {field: "the-name"})
    assert modern.admit(call, headers(method, "the-name"), SUPPORTED)
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(call, headers(method, "another"), SUPPORTED)
    assert code_of(excinfo) == HEADER_MISMATCH


def test_mcp_name_without_the_field_it_mirrors_is_a_header_mismatch() -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.admit(body("tasks/get"), headers("tasks/get", "t-1"), SUPPORTED)
    assert code_of(excinfo) == HEADER_MISMATCH


def test_a_method_without_a_name_field_ignores_mcp_name() -> None:
    assert "tools/list" not in modern.NAME_FIELDS
    assert modern.admit(body(), headers("tools/list", "anything"), SUPPORTED)


def test_the_base64_form_is_decoded_before_comparison() -> None:
    name = "grüße/日本"
    assert modern.decode_header_value(b64(name)) == name
    call = body("tools/call", {"name": name})
    assert modern.admit(call, headers("tools/call", b64(name)), SUPPORTED)


@pytest.mark.parametrize(
    "raw", ["=?base64?not base64!?=", "=?base64?" + base64.b64encode(b"\xff").decode() + "?=", "é", "a\tb", "a\x7fb"]
)
def test_an_invalid_header_value_is_a_header_mismatch(raw: str) -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.decode_header_value(raw)
    assert code_of(excinfo) == HEADER_MISMATCH


# --------------------------------------------------------------------------------------- x-mcp-header

SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        "note": {"type": "string"},
    },
}
REGION, COUNT, DRY = (modern.HEADER_PARAM_PREFIX + name for name in ("region", "count", "dry"))


def test_annotated_arguments_are_mirrored_by_their_param_headers() -> None:
    arguments = {"region": "eu", "count": 3, "dry": True, "note": "free"}
    modern.check_param_headers(SCHEMA, arguments, {REGION: "eu", COUNT: " 3 ", DRY: "true"})
    modern.check_param_headers(SCHEMA, {"count": 3.0}, {COUNT: "3"})
    modern.check_param_headers(SCHEMA, {}, {})  # nothing annotated sent, no header needed


@pytest.mark.parametrize(
    ("arguments", "sent"),
    [
        ({"region": "eu"}, {}),
        ({"region": "eu"}, {REGION: "us"}),
        ({}, {REGION: "eu"}),
        ({"count": 3}, {COUNT: "three"}),
        ({"dry": False}, {DRY: "true"}),
    ],
    ids=["missing", "different", "without the argument", "not a number", "boolean differs"],
)
def test_a_param_header_that_does_not_mirror_its_argument_is_a_header_mismatch(
    arguments: dict[str, Any], sent: dict[str, str]
) -> None:
    with pytest.raises(ProtocolError) as excinfo:
        modern.check_param_headers(SCHEMA, arguments, sent)
    assert code_of(excinfo) == HEADER_MISMATCH


# ---------------------------------------------------------------------------------------- decoration


@pytest.mark.parametrize("method", sorted(modern.CACHEABLE_METHODS))
def test_a_cacheable_result_gets_private_cache_hints_and_the_server_identity(method: str) -> None:
    result = modern.decorate(method, {"tools": []}, SERVER_INFO, 5000)
    assert result["resultType"] == "complete"
    assert result["_meta"][modern.META_SERVER_INFO] == SERVER_INFO
    assert (result["ttlMs"], result["cacheScope"]) == (5000, "private")


def test_other_results_carry_no_cache_hints_and_what_a_handler_set_is_kept() -> None:
    called = modern.decorate("tools/call", {"content": []}, SERVER_INFO, 5000)
    assert "ttlMs" not in called and "cacheScope" not in called
    own = modern.decorate("tools/list", {"resultType": "task", "_meta": {"k": 1}}, SERVER_INFO, 5000)
    assert own["resultType"] == "task" and "ttlMs" not in own, "a task is not cached"
    assert own["_meta"] == {"k": 1, modern.META_SERVER_INFO: SERVER_INFO}
    hinted = modern.decorate("tools/list", {"ttlMs": 1}, SERVER_INFO, 5000)
    assert hinted["ttlMs"] == 1
