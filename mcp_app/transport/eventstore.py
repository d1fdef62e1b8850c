"""SSE event stores (the ``EVENT_STORE`` backend): what makes handshake-era streams resumable with ``Last-Event-ID``.

Event ids are ``<stream id>.<sequence>``, the stream id starting with a prefix of its session key.
``MemoryEventStore`` serves one process (the embedded default), ``RedisEventStore`` every process; both bound
each stream and each owner. Design: docs/architecture.md ("SSE streams, resumption and cancellation").
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import orjson

from ..backends import RedisBacked, backends
from ..conf import mcp_settings

STREAM_PREFIX_CHARS = 12
SOCKET_TIMEOUT_SECONDS = 4.0
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


# Whose events a stream holds: (tenant pk, agent pk).
Owner = tuple[int, int]


class EventStore:
    """Interface: append events of a stream, read the ones after a sequence number."""

    async def append_many(self, stream_id: str, events: Sequence[tuple[int, Any]], owner: Owner | None = None) -> bool:
        """Append a burst of events (``(sequence, message)``, in order) at once: one round trip in Redis. When it
        returns True, every one of them is readable by ``after``; False: ``owner`` is over its bound and none
        was stored (see the module docstring)."""
        raise NotImplementedError

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


def _owner_bounds(owner: Owner | None) -> list[tuple[str, int]]:
    """The (counter name, bound) pairs an append of ``owner`` is held to: its agent's, then its tenant's."""
    if owner is None:
        return []
    tenant_pk, agent_pk = owner
    bounds = [
        (f"agent:{agent_pk}", int(mcp_settings.EVENT_STORE_MAX_BYTES_PER_AGENT)),
        (f"tenant:{tenant_pk}", int(mcp_settings.EVENT_STORE_MAX_BYTES_PER_TENANT)),
    ]
    return [(name, bound) for name, bound in bounds if bound > 0]


def _ttl() -> float:
    return float(mcp_settings.EVENT_STORE_TTL_SECONDS)


class MemoryEventStore(EventStore):
    """Per-process store, bounded in streams, and in events and bytes per stream. Events are kept encoded, as
    the Redis store keeps them: bytes are not objects the garbage collector walks, and its full collections would
    otherwise walk every kept message of up to ``max_streams`` streams."""

    def __init__(
        self, max_streams: int = 10_000, max_events: int = 1_000, max_bytes: int | None = None, **_: Any
    ) -> None:
        # Per stream: its events as (sequence, ``[sequence, message]`` encoded), and the sum of their sizes.
        self._streams: OrderedDict[str, list[tuple[int, bytes]]] = OrderedDict()
        self._bytes: dict[str, int] = {}
        self._max_streams = max_streams
        self._max_events = max_events
        self._max_bytes = _max_bytes(max_bytes)
        self._lock = threading.Lock()
        self._marks: OrderedDict[str, float] = OrderedDict()
        self._touched: dict[str, float] = {}
        # Per owner counter (``_owner_bounds``): when its window ends, and the bytes appended in it.
        self._windows: dict[str, tuple[float, int]] = {}

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
        cutoff = time.monotonic() - _ttl()
        with self._lock:
            stale = [stream_id for stream_id, touched in self._touched.items() if touched < cutoff]
            for stream_id in [] if dry_run else stale:
                self._forget(stream_id)
        return len(stale)

    async def append_many(self, stream_id: str, events: Sequence[tuple[int, Any]], owner: Owner | None = None) -> bool:
        encoded = [(sequence, orjson.dumps([sequence, message])) for sequence, message in events]
        size = sum(len(item[1]) for item in encoded)
        with self._lock:
            now = time.monotonic()
            for name in [name for name, (ends, _) in self._windows.items() if ends <= now]:
                del self._windows[name]
            bounds = _owner_bounds(owner)
            if any(self._windows.get(name, (0.0, 0))[1] + size > bound for name, bound in bounds):
                return False
            for name, _bound in bounds:
                ends, used = self._windows.get(name, (now + _ttl(), 0))
                self._windows[name] = (ends, used + size)
            stored = self._streams.setdefault(stream_id, [])
            self._touched[stream_id] = now
            self._streams.move_to_end(stream_id)
            total = self._bytes.get(stream_id, 0) + size
            stored.extend(encoded)
            drop = 0
            while len(stored) - drop > 1 and (len(stored) - drop > self._max_events or total > self._max_bytes):
                total -= len(stored[drop][1])
                drop += 1
            del stored[:drop]
            self._bytes[stream_id] = total
            while len(self._streams) > self._max_streams:
                self._forget(next(iter(self._streams)))
        return True

    def _forget(self, stream_id: str) -> None:
        self._streams.pop(stream_id, None)
        self._touched.pop(stream_id, None)
        self._bytes.pop(stream_id, None)

    async def after(self, stream_id: str, sequence: int) -> list[tuple[int, Any]]:
        with self._lock:
            kept = [data for number, data in self._streams.get(stream_id, ()) if number > sequence]
        return [(number, message) for number, message in map(orjson.loads, kept)]


# KEYS: the stream's sorted set, its byte count, then the owner's counters. ARGV: max events, max bytes, TTL, the
# counters' bounds (one per counter key), then (sequence, event) pairs. Refuses (-1, nothing stored) when the
# burst would take a counter over its bound; else counts it in each (a window of one TTL from the first), adds
# the events and drops the oldest while over either stream bound (the newest one stays), all in one round trip.
_APPEND = """
local counters = #KEYS - 2
local first = 4 + counters
local size = 0
for i = first, #ARGV, 2 do size = size + #ARGV[i + 1] end
for k = 1, counters do
  if tonumber(redis.call('GET', KEYS[k + 2]) or '0') + size > tonumber(ARGV[3 + k]) then return -1 end
end
for k = 1, counters do
  redis.call('INCRBY', KEYS[k + 2], size)
  if redis.call('TTL', KEYS[k + 2]) < 0 then redis.call('EXPIRE', KEYS[k + 2], ARGV[3]) end
end
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
for i = first, #ARGV, 2 do
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


_APPEND_SHA = hashlib.sha1(_APPEND.encode()).hexdigest()  # noqa: S324 - Redis names scripts by their SHA-1


class RedisEventStore(RedisBacked, EventStore):
    """Shared store: one Redis sorted set per stream, scored by sequence, expiring after the TTL, holding at most
    ``max_events`` and ``max_bytes`` (the oldest dropped first, in the same round trip as the append: a Lua script
    that also keeps the stream's byte count in a key of its own).

    The appends that the streams of one event loop make in the same turn go to Redis together, ``EVALSHA`` each in
    one pipeline (``redis_pool.pipelined``): one round trip and one pass through redis-py's connection pool for
    the turn, however many streams flushed in it. Each append still returns only once Redis holds it, and fails
    if the store does."""

    def __init__(
        self, url: str, prefix: str = "mcp:events", max_events: int = 1_000, max_bytes: int | None = None, **_: Any
    ) -> None:
        super().__init__(url, prefix)
        self._max_events = max_events
        self._max_bytes = _max_bytes(max_bytes)

    def _client(self, socket_timeout: float | None = SOCKET_TIMEOUT_SECONDS) -> Any:
        return super()._client(socket_timeout)

    async def append_many(self, stream_id: str, events: Sequence[tuple[int, Any]], owner: Owner | None = None) -> bool:
        key = f"{self._prefix}:{stream_id}"
        bounds = _owner_bounds(owner)
        keys = [key, f"{key}:bytes", *(f"{self._prefix}:owner:{name}" for name, _bound in bounds)]
        arguments: list[Any] = [self._max_events, self._max_bytes, max(1, int(_ttl())), *(b for _n, b in bounds)]
        for sequence, message in events:
            arguments += [sequence, orjson.dumps([sequence, message])]
        from redis.exceptions import NoScriptError

        from ..redis_pool import pipelined

        client = self._client()
        command = ("EVALSHA", _APPEND_SHA, len(keys), *keys, *arguments)
        try:
            (total,) = await pipelined(client, command)
        except NoScriptError:
            await client.script_load(_APPEND)  # once per Redis (again after a restart or a SCRIPT FLUSH)
            (total,) = await pipelined(client, command)
        return int(total) >= 0

    async def check(self) -> None:
        await self._client().ping()

    def purge_expired(self, *, dry_run: bool = False) -> int:
        """Keys expire by themselves; this removes any left without an expiry (a process that died between
        writing an event and setting its TTL), so nothing stays forever."""
        client = self._sync_client()
        removed = 0
        for key in client.scan_iter(match=f"{self._prefix}:*", count=500):
            if client.ttl(key) == -1:
                removed += 1 if dry_run else client.delete(key)
        return removed

    async def mark(self, key: str, ttl_seconds: float) -> None:
        await self._client().set(f"{self._prefix}:mark:{key}", b"1", ex=max(1, int(ttl_seconds)))

    async def marked(self, key: str) -> bool:
        return bool(await self._client().exists(f"{self._prefix}:mark:{key}"))

    async def after(self, stream_id: str, sequence: int) -> list[tuple[int, Any]]:
        rows = await self._client().zrangebyscore(f"{self._prefix}:{stream_id}", f"({sequence}", "+inf")
        return [tuple(orjson.loads(row)) for row in rows]


def get_event_store() -> EventStore:
    """The ``EVENT_STORE`` backend of this process."""
    store: EventStore = backends["EVENT_STORE"]
    return store


def purge_event_store(now: object = None, dry_run: bool = False) -> int:
    """Purge the configured event store (see ``EventStore.purge_expired``); registered with
    ``mcp_app.maintenance`` for ``mcp_purge`` (and so Celery beat). ``now`` is unused: events expire by TTL."""
    return get_event_store().purge_expired(dry_run=dry_run)
