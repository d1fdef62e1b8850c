"""Limits on what a request body may hold, checked before (or while) it is decoded. Pure Python.

``exceeds_depth``: too deep a nesting, found without decoding (decoders recurse); ``find_nul``: a ``\\u0000``
in a decoded value (PostgreSQL rejects NUL in ``text`` and ``jsonb``); ``check_client_metadata``: the size of
the clientInfo and capabilities stored with a session or task.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

import orjson

from .errors import InvalidParams

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_NUL_ESCAPE = re.compile(rb"\\u0000", re.IGNORECASE)


def exceeds_depth(body: bytes, max_depth: int) -> bool:
    """Whether ``body`` nests arrays/objects deeper than ``max_depth`` (outside strings)."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    return json_depth(body) > max_depth


def json_depth(body: bytes) -> int:
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return max(0, max(accumulate(_STEP[byte] for byte in brackets)))


def may_hold_nul(body: bytes) -> bool:
    return _NUL_ESCAPE.search(body) is not None


def find_nul(value: Any) -> bool:
    """Whether a decoded JSON value holds a NUL character in any string or object key."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key:
                    return True
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check_client_metadata(client_info: Any, capabilities: Any, max_bytes: int) -> None:
    """Refuse (``InvalidParams``) a clientInfo + capabilities declaration larger than ``max_bytes`` encoded:
    it is stored with the session or task, and must not grow the database without bound."""
    size = len(orjson.dumps(client_info)) + len(orjson.dumps(capabilities))
    if size > max_bytes:
        raise InvalidParams(
            f"Invalid params: clientInfo and capabilities take {size} bytes; at most {max_bytes} are accepted",
            {"maxBytes": max_bytes},
        )
