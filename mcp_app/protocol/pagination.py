"""Opaque cursor pagination for list methods: the cursor names an offset into the server's ordered catalog. A page
holds at most ``size`` items and, with ``max_bytes``, ends before its items' JSON passes that many bytes (it
always holds one item, so a cursor always advances).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from .errors import InvalidParams

_PREFIX = "mcp-page:"


def encode_cursor(position: int, prefix: str = _PREFIX) -> str:
    """The opaque cursor naming ``position`` (``prefix`` tells one kind of list's cursors from another's)."""
    return base64.urlsafe_b64encode(f"{prefix}{position}".encode()).decode().rstrip("=")


def decode_cursor(cursor: Any, prefix: str = _PREFIX) -> int:
    """The position a cursor of ``encode_cursor`` names; -32602 for anything else."""
    if not isinstance(cursor, str) or not cursor:
        raise InvalidParams("Invalid params: invalid cursor")
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidParams("Invalid params: invalid cursor") from exc
    if not text.startswith(prefix) or not text[len(prefix) :].isdigit():
        raise InvalidParams("Invalid params: invalid cursor")
    return int(text[len(prefix) :])


def page(
    items: list[dict[str, Any]], params: dict[str, Any], size: int, key: str, max_bytes: int | None = None
) -> dict[str, Any]:
    """``{key: items[offset:end]}`` plus ``nextCursor`` when more remain; bad cursors are -32602."""
    offset = decode_cursor(params["cursor"]) if params.get("cursor") is not None else 0
    if offset > len(items):
        raise InvalidParams("Invalid params: invalid cursor")
    end = min(offset + size, len(items))
    if max_bytes is not None:
        used = 0
        for index in range(offset, end):
            used += len(orjson.dumps(items[index]))
            if used > max_bytes and index > offset:
                end = index
                break
    result: dict[str, Any] = {key: items[offset:end]}
    if end < len(items):
        result["nextCursor"] = encode_cursor(end)
    return result
