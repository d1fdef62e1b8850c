"""Canonical JSON (RFC 8785, the JSON Canonicalization Scheme) and the sha256 digests that address by content:
catalog versions by their definitions, approvals by a call's arguments. Two values have the same digest exactly
when they are the same JSON (key order and number spelling do not count)."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    """``value``'s RFC 8785 canonical UTF-8 JSON; ``ValueError`` for what JSON cannot hold (NaN, huge ints)."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(f"not canonical JSON: {exc}") from exc


def json_digest(value: Any) -> str:
    """The lowercase hex sha256 of ``canonical_json(value)``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
