"""SSE event stores: what makes handshake-era streams resumable with ``Last-Event-ID``.

Every event sent on a session's stream gets the id ``<stream id>.<sequence>``; the stream id starts with a
prefix of the session key, so a client can only resume streams of its own session. The store keeps each
stream's events for ``EVENT_STORE_TTL_SECONDS``, at most ``max_events`` of them (an ``OPTIONS`` entry) and at most
``EVENT_STORE_MAX_BYTES`` of them (the size of each event as stored, its JSON; an ``OPTIONS`` entry ``max_bytes``
overrides it): the oldest are dropped first, the newest event is always kept. ``MemoryEventStore`` serves one process (the embedded
default); ``RedisEventStore`` serves every process (configure it whenever more than one daphne runs).

Stores are chosen with ``MCP_APP["EVENT_STORE"] = {"BACKEND": dotted.path, "OPTIONS": {...}}``.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import orjson
from django.utils.module_loading import import_string

from ..conf import mcp_settings, on_reload

STREAM_PREFIX_CHARS = 12
CONNECT_TIMEOUT_SECONDS = 2.0


POST_STREAM = "p"
GET_STREAM = "g"


def new_stream_id(session_key: str, kind: str) -> str:
    """A stream id that encodes its session (prefix of the key) and its kind (a POST response or a GET stream)."""
    return f"{session_key[:STREAM_PREFIX_CHARS]}{kind}{secrets.token_hex(6)}"


def stream_kind(stream_id: str) -> str:
    return stream_id[STREAM_PREFIX_CHARS : STREAM_PREFIX_CHARS + 1]


def parse_event_id(event_id: str, session_key: str) -> tuple[str, int] | None:
    """``(stream id, sequence)`` of an event id of this session, else ``None``."""
    stream_id, _, sequence = event_id.strip().rpartition(".")
    if not stream_id.startswith(session_key[:STREAM_PREFIX_CHARS]) or not sequence.isdigit():
        return None
    if stream_kind(stream_id) not in (POST_STREAM, GET_STREAM):
        return None
    return stream_id, int(sequence)


class EventStore:
    """Interface: append events of a stream, read the ones after a sequence number."""

    async def append(self, stream_id: str, sequence: int, message: Any) -> None:
        raise NotImplementedError

    async def append_many(self, stream_id: str, events: Sequence[tuple[int, Any]]) -> None:
        """Append a burst of events (``(sequence, message)``, in order) at once: one round trip in Redis. When it
        returns, every one of them is readable by ``after``."""
        for sequence, message in events:
            await self.append(stream_id, sequence, message)

    async def after(self, stream_id: str, sequence: int) -> list[tuple[int, Any]]:
        raise NotImplementedError

    def purge_expired(self, *, dry_run: bool = False) -> int:
        """Drop what outlived ``EVENT_STORE_TTL_SECONDS`` (``dry_run``: only count it); returns how many streams
        (or keys). Sync: the purge runs from a management command or a Celery task, not on the request path."""
        return 0

    async def check(self) -> None:
        """Raise (a ``channel_layer.LAYER_ERRORS`` error) if the store is unreachable; a no-op in memory."""

    async def mark(self, key: str, ttl_seconds: float) -> None:
        """Remember ``key`` for ``ttl_seconds`` (e.g. a cancellation that arrived before its call listened)."""
        raise NotImplementedError

    async def marked(self, key: str) -> bool:
        raise NotImplementedError


def _max_bytes(max_bytes: int | None) -> int:
    return int(mcp_settings.EVENT_STORE_MAX_BYTES if max_bytes is None else max_bytes)


class MemoryEventStore(EventStore):
    """Per-process store, bounded in streams, and in events and bytes per stream."""

    def __init__(
        self, max_streams: int = 10_000, max_events: int = 1_000, max_bytes: int | None = None, **_: Any
    ) -> None:
        # Per stream: its events as (sequence, message, size), and the sum of their sizes.
        self._streams: OrderedDict[str, list[tuple[int, Any, int]]] = OrderedDict()
        self._bytes: dict[str, int] = {}
        self._max_streams = max_streams
        self._max_events = max_events
        self._max_bytes = _max_bytes(max_bytes)
        self._lock = threading.Lock()
        self._marks: OrderedDict[str, float] = OrderedDict()
        self._touched: dict[str, float] = {}

    async def mark(self, key: str, ttl_seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            self._marks[key] = now + ttl_seconds
            self._marks.move_to_end(key)
            while len(self._marks) > self._max_streams or (self._marks and next(iter(self._marks.values())) < now):
                self._marks.popitem(last=False)

    async def marked(self, key: str) -> bool:
        with self._lock:
            expires = self._marks.get(key)
        return expires is not None and expires > time.monotonic()

    def purge_expired(self, *, dry_run: bool = False) -> int:
        cutoff = time.monotonic() - float(mcp_settings.EVENT_STORE_TTL_SECONDS)
        with self._lock:
            stale = [stream_id for stream_id, touched in self._touched.items() if touched < cutoff]
            for stream_id in [] if dry_run else stale:
                self._streams.pop(stream_id, None)
                self._touched.pop(stream_id, None)
                self._bytes.pop(stream_id, None)
        return len(stale)

    async def append(self, stream_id: str, sequence: int, message: Any) -> None:
        await self.append_many(stream_id, ((sequence, message),))

    async def append_many(self, stream_id: str, events: Sequence[tuple[int, Any]]) -> None:
        with self._lock:
            stored = self._streams.setdefault(stream_id, [])
            self._touched[stream_id] = time.monotonic()
            self._streams.move_to_end(stream_id)
            total = self._bytes.get(stream_id, 0)
            for sequence, message in events:
                size = len(orjson.dumps([sequence, message]))
                stored.append((sequence, message, size))
                total += size
            drop = 0
            while len(stored) - drop > 1 and (len(stored) - drop > self._max_events or total > self._max_bytes):
                total -= stored[drop][2]
                drop += 1
            del stored[:drop]
            self._bytes[stream_id] = total
            while len(self._streams) > self._max_streams:
                evicted, _ = self._streams.popitem(last=False)
                self._touched.pop(evicted, None)
                self._bytes.pop(evicted, None)

    async def after(self, stream_id: str, sequence: int) -> list[tuple[int, Any]]:
        with self._lock:
            return [
                (number, message) for number, message, _size in self._streams.get(stream_id, ()) if number > sequence
            ]


# KEYS: the stream's sorted set, its byte count. ARGV: max events, max bytes, TTL, then (sequence, event) pairs.
# Adds the events, then drops the oldest while over either bound (the newest one stays), all in one round trip.
_APPEND = """
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
for i = 4, #ARGV, 2 do
  if redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then total = total + #ARGV[i + 1] end
end
local count = redis.call('ZCARD', KEYS[1])
local max_events, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
while count > 1 and (count > max_events or total > max_bytes) do
  local oldest = redis.call('ZPOPMIN', KEYS[1])
  total = total - #oldest[1]
  count = count - 1
end
redis.call('SET', KEYS[2], total, 'EX', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return total
"""


class RedisEventStore(EventStore):
    """Shared store: one Redis sorted set per stream, scored by sequence, expiring after the TTL, holding at most
    ``max_events`` and ``max_bytes`` (the oldest dropped first, in the same round trip as the append: a Lua script
    that also keeps the stream's byte count in a key of its own)."""

    def __init__(
        self, url: str, prefix: str = "mcp:events", max_events: int = 1_000, max_bytes: int | None = None, **_: Any
    ) -> None:
        self._max_events = max_events
        self._max_bytes = _max_bytes(max_bytes)
        self._url = url
        self._prefix = prefix

    def _client(self) -> Any:
        from ..redis_pool import redis_client

        return redis_client(self._url, socket_timeout=CONNECT_TIMEOUT_SECONDS * 2)

    async def append(self, stream_id: str, sequence: int, message: Any) -> None:
        await self.append_many(stream_id, ((sequence, message),))

    async def append_many(self, stream_id: str, events: Sequence[tuple[int, Any]]) -> None:
        key = f"{self._prefix}:{stream_id}"
        arguments: list[Any] = [self._max_events, self._max_bytes, max(1, int(mcp_settings.EVENT_STORE_TTL_SECONDS))]
        for sequence, message in events:
            arguments += [sequence, orjson.dumps([sequence, message])]
        await self._client().eval(_APPEND, 2, key, f"{key}:bytes", *arguments)

    async def check(self) -> None:
        await self._client().ping()

    def purge_expired(self, *, dry_run: bool = False) -> int:
        """Keys expire by themselves; this removes any left without an expiry (a process that died between
        writing an event and setting its TTL), so nothing stays forever."""
        import redis

        client = redis.Redis.from_url(self._url, socket_connect_timeout=CONNECT_TIMEOUT_SECONDS)
        removed = 0
        try:
            for key in client.scan_iter(match=f"{self._prefix}:*", count=500):
                if client.ttl(key) == -1:
                    removed += 1 if dry_run else client.delete(key)
        finally:
            client.close()
        return removed

    async def mark(self, key: str, ttl_seconds: float) -> None:
        await self._client().set(f"{self._prefix}:mark:{key}", b"1", ex=max(1, int(ttl_seconds)))

    async def marked(self, key: str) -> bool:
        return bool(await self._client().exists(f"{self._prefix}:mark:{key}"))

    async def after(self, stream_id: str, sequence: int) -> list[tuple[int, Any]]:
        rows = await self._client().zrangebyscore(f"{self._prefix}:{stream_id}", f"({sequence}", "+inf")
        return [tuple(orjson.loads(row)) for row in rows]


_store: EventStore | None = None
_store_lock = threading.Lock()


def get_event_store() -> EventStore:
    global _store
    with _store_lock:
        if _store is None:
            config = mcp_settings.EVENT_STORE
            _store = import_string(config["BACKEND"])(**config.get("OPTIONS", {}))
        return _store


@on_reload
def reset_event_store() -> None:
    global _store
    with _store_lock:
        _store = None


def purge_event_store(now: object = None, dry_run: bool = False) -> int:
    """Purge the configured event store (see ``EventStore.purge_expired``); registered with
    ``mcp_app.maintenance`` for ``mcp_purge`` (and so Celery beat). ``now`` is unused: events expire by TTL."""
    return get_event_store().purge_expired(dry_run=dry_run)
