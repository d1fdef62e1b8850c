"""Canonical JSON and its digests: the same JSON gives the same digest whatever its spelling (RFC 8785)."""

import hashlib

import pytest

from mcp_app.protocol.canonical import canonical_json, json_digest


def test_key_order_and_number_spelling_do_not_count():
    assert canonical_json({"b": [1.0, 2.5], "a": "é"}) == '{"a":"é","b":[1,2.5]}'.encode()
    assert json_digest({"a": 1, "b": {"d": None, "c": True}}) == json_digest({"b": {"c": True, "d": None}, "a": 1.0})


def test_the_digest_is_the_sha256_of_the_canonical_form():
    assert json_digest({"x": 1}) == hashlib.sha256(b'{"x":1}').hexdigest()


def test_different_json_has_a_different_digest():
    assert json_digest({"path": "/tmp/a"}) != json_digest({"path": "/tmp/b"})
    assert json_digest({"n": 1}) != json_digest({"n": "1"})


def test_values_json_cannot_hold_are_refused():
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})
