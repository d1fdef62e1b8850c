"""Server-Sent Events framing. Each JSON-RPC message is one event; comments keep idle streams open."""

from __future__ import annotations

from typing import Any

import orjson

SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def event(message: Any, *, event_id: str | None = None) -> bytes:
    """One ``data:`` event holding a JSON message (orjson never emits raw newlines, so one line suffices)."""
    head = b"id: " + event_id.encode() + b"\n" if event_id is not None else b""
    return head + b"data: " + orjson.dumps(message) + b"\n\n"


def priming(event_id: str, retry_ms: int) -> bytes:
    """The first event of a resumable stream (2025-11-25): an id to resume from, and the reconnection delay."""
    return b"id: " + event_id.encode() + b"\nretry: " + str(retry_ms).encode() + b"\ndata: \n\n"


def comment(text: str) -> bytes:
    return b": " + text.encode() + b"\n\n"


def error_event(message: Any) -> bytes:
    """An ``event: error`` holding a JSON-RPC error: the stream is ending because of the server, not the call.
    SDK clients only dispatch ``message`` events, so it is seen by people and tools, never misread as a reply."""
    return b"event: error\ndata: " + orjson.dumps(message) + b"\n\n"
