"""Superseded progress coalesced for a slow consumer, on bytes: plain Python, no Twisted (``edge_limits`` uses it).

``Backlog`` holds response bytes in order, a newer ``notifications/progress`` replacing the held one of its
token; ``sse_events``, ``progress_key`` and ``frame`` are pure functions on bytes. Design: docs/robustness.md.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

PROGRESS_METHOD = b'"method":"notifications/progress"'


def sse_events(body: bytes) -> list[bytes]:
    """``body`` cut after each blank line (the end of an SSE event); joined again they are ``body``."""
    parts = body.split(b"\n\n")
    events = [part + b"\n\n" for part in parts[:-1]]
    if parts[-1]:
        events.append(parts[-1])
    return events


def progress_key(event: bytes) -> bytes | None:
    """The progress token (as JSON) of an SSE event carrying a ``notifications/progress``, else ``None``."""
    if PROGRESS_METHOD not in event or not event.endswith(b"\n\n"):
        return None
    for line in event.split(b"\n"):
        if line.startswith(b"data: "):
            try:
                message = orjson.loads(line[6:])
            except orjson.JSONDecodeError:
                return None
            if isinstance(message, dict) and message.get("method") == "notifications/progress":
                params = message.get("params")
                if isinstance(params, dict) and "progressToken" in params:
                    return orjson.dumps(params["progressToken"])
            return None
    return None


def frame(pieces: Iterable[tuple[bytes, bool]]) -> list[bytes]:
    """The parts to write for ``pieces`` (bytes, whether they are chunk data): runs of chunk data as one chunk."""
    parts: list[bytes] = []
    chunk: list[bytes] = []
    for data, is_chunk in [*pieces, (b"", False)]:
        if is_chunk:
            chunk.append(data)
            continue
        if chunk:
            body = b"".join(chunk)
            parts += [b"%x\r\n" % len(body), body, b"\r\n"]
            chunk = []
        if data:
            parts.append(data)
    return parts


class Backlog:
    """Response bytes held back in order, superseded progress dropped as it is superseded. ``size``: the bytes
    held (what the client has not read yet, beside the transport's)."""

    def __init__(self) -> None:
        self._pieces: list[tuple[bytes, bool] | None] = []  # None: superseded
        self._progress: dict[bytes, int] = {}  # progress key -> index of its held event
        self.size = 0

    def __bool__(self) -> bool:
        return bool(self._pieces)

    def hold(self, data: bytes, chunk: bool) -> None:
        """Hold ``data``: response bytes, or (``chunk``) the data of one chunk of the body, cut into its events."""
        if not chunk or PROGRESS_METHOD not in data:  # nothing to coalesce: held whole, not copied event by event
            self._append(data, chunk)
            return
        for event in sse_events(data):
            key = progress_key(event)
            if key is not None:
                superseded = self._progress.get(key)
                held = self._pieces[superseded] if superseded is not None else None
                if superseded is not None and held is not None:
                    self.size -= len(held[0])
                    self._pieces[superseded] = None
                self._progress[key] = len(self._pieces)
            self._append(event, True)

    def _append(self, data: bytes, chunk: bool) -> None:
        self._pieces.append((data, chunk))
        self.size += len(data)

    def release(self) -> list[bytes]:
        """The held bytes as the parts to write, in order; the backlog is empty after."""
        pieces = self._pieces
        self._pieces, self._progress, self.size = [], {}, 0
        return frame(piece for piece in pieces if piece is not None)
