"""The pre-decoding scans of ``protocol.limits``: depth outside strings, NUL detection."""

from __future__ import annotations

import pytest

from mcp_app.protocol import jsonrpc, limits
from mcp_app.protocol.errors import InvalidRequest, ParseError


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"1", 0),
        (b"[]", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'["[[[[", "\\"[[["]', 1),
        (b"[[], [], [[]]]", 3),
    ],
)
def test_json_depth_counts_brackets_outside_strings(body, depth):
    assert limits.json_depth(body) == depth


def test_a_body_deeper_than_the_limit_never_reaches_the_decoder():
    body = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(InvalidRequest):
        jsonrpc.decode(body, max_depth=64)


def test_unbalanced_deep_garbage_is_refused_too():
    with pytest.raises((InvalidRequest, ParseError)):
        jsonrpc.decode(b"[" * 5000 + b"1", max_depth=64)


def test_nul_is_found_in_values_and_keys_only_when_decoded():
    assert limits.find_nul({"a": ["x", {"b\x00": 1}]})
    assert limits.find_nul(["\x00"])
    assert not limits.find_nul({"a": ["\\u0000"]})
    with pytest.raises(InvalidRequest):
        jsonrpc.decode(b'{"a": "\\u0000"}')
    assert jsonrpc.decode(b'{"a": "\\\\u0000"}') == {"a": "\\u0000"}
