"""JSON-RPC framing: strict ``decode`` (ParseError) and ``classify`` (request, notification, client response,
or InvalidRequest with the id that ``recover_id`` can salvage)."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.protocol.errors import INVALID_REQUEST, PARSE_ERROR, InvalidRequest, ParseError
from mcp_app.protocol.jsonrpc import (
    ClientResponse,
    Notification,
    Request,
    classify,
    decode,
    encode,
    recover_id,
)


def test_decode_accepts_valid_json() -> None:
    assert decode(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":18446744073709551615}}') == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "ping",
        "params": {"n": 18446744073709551615},
    }


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"jsonrpc": "2.0",', id="truncated"),
        pytest.param(b"", id="empty"),
        pytest.param(b'{"id": 1} trailing', id="trailing-garbage"),
        pytest.param(b'{"n": NaN}', id="nan"),
        pytest.param(b'{"n": Infinity}', id="infinity"),
        pytest.param(b'{"s": "\xff"}', id="invalid-utf8"),
        pytest.param(b'"\\ud800"', id="lone-surrogate"),
        # The module contract: integers beyond 64 bits are parse errors, not silently rounded floats.
        pytest.param(b'{"n": 18446744073709551616}', id="int-above-u64"),
        pytest.param(b'{"n": -9223372036854775809}', id="int-below-i64"),
    ],
)
def test_decode_rejects_with_parse_error(body: bytes) -> None:
    with pytest.raises(ParseError) as caught:
        decode(body)
    assert caught.value.code == PARSE_ERROR


def test_encode_round_trips() -> None:
    payload = {"jsonrpc": "2.0", "id": "a", "result": {"text": "héllo", "n": [1, 2.5, None, True]}}
    assert decode(encode(payload)) == payload


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}},
            Request(id=7, method="tools/call", params={"name": "x"}),
        ),
        ({"jsonrpc": "2.0", "id": "r-1", "method": "ping"}, Request(id="r-1", method="ping", params=None)),
        ({"jsonrpc": "2.0", "id": 0, "method": "ping"}, Request(id=0, method="ping", params=None)),
        (
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            Notification(method="notifications/initialized", params=None),
        ),
        ({"jsonrpc": "2.0", "id": 3, "result": {}}, ClientResponse(id=3, result={}, error=None)),
        (
            {"jsonrpc": "2.0", "id": "s", "error": {"code": -1, "message": "no"}},
            ClientResponse(id="s", result=None, error={"code": -1, "message": "no"}),
        ),
    ],
)
def test_classify_valid_messages(obj: dict[str, Any], expected: object) -> None:
    assert classify(obj) == expected


@pytest.mark.parametrize(
    ("obj", "recovered"),
    [
        pytest.param([], None, id="not-an-object"),
        pytest.param("ping", None, id="string"),
        pytest.param({"id": 4, "method": "ping"}, 4, id="jsonrpc-missing"),
        pytest.param({"jsonrpc": "1.0", "id": "a", "method": "ping"}, "a", id="jsonrpc-1.0"),
        pytest.param({"jsonrpc": 2.0, "id": 5, "method": "ping"}, 5, id="jsonrpc-number"),
        pytest.param({"jsonrpc": "2.0", "id": None, "method": "ping"}, None, id="null-id"),
        pytest.param({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, id="bool-id"),
        pytest.param({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None, id="float-id"),
        pytest.param({"jsonrpc": "2.0", "id": 9, "method": 42}, 9, id="non-string-method"),
        pytest.param({"jsonrpc": "2.0", "id": 9, "method": ""}, 9, id="empty-method"),
        pytest.param({"jsonrpc": "2.0", "method": ["ping"]}, None, id="notification-bad-method"),
        pytest.param({"jsonrpc": "2.0", "id": 2, "result": 1, "error": {}}, 2, id="result-and-error"),
        pytest.param({"jsonrpc": "2.0", "id": 2}, 2, id="neither"),
        pytest.param({"jsonrpc": "2.0", "id": None, "result": {}}, None, id="response-null-id"),
    ],
)
def test_classify_invalid_request_and_recovered_id(obj: Any, recovered: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        classify(obj)
    assert caught.value.code == INVALID_REQUEST
    assert recover_id(obj) == recovered
    assert type(recover_id(obj)) is type(recovered)
