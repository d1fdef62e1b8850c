"""The invalidation log: how a change made in one process reaches the caches of every process within a second
(design, the staleness bound and Redis outages: docs/architecture.md).

- ``publish(*keys)``: once the transaction commits, drop what ``token:12``, ``agent:3``, ``tenant:1``,
  ``server:7``, ``session:40``... name from this process's caches (``apply``) and append them to the shared log,
  which every other process follows from a background thread.
- ``healthy()``: whether caches may serve: the log was heard within ``INVALIDATION_STALENESS_SECONDS``; a follower
  that reconnects empties every cache, since it cannot know what it missed.
- ``generation()`` / ``store_allowed(generation)``: a cold load is not stored if anything was invalidated while
  it queried.

Backends (``INVALIDATION`` of ``mcp_app.backends``): ``LocalInvalidation`` (one process), ``RedisInvalidation``
(a capped stream read with a blocking ``XREAD``), ``DatabaseInvalidation`` (a polled table, without Redis).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.apps import apps
from django.db import close_old_connections, connections, transaction
from django.db.models import Max
from django.utils import timezone

from .backends import Health, RedisBacked, backends
from .conf import mcp_settings, on_reload

logger = logging.getLogger("mcp_app.caching")

# Appliers: callables taking the invalidated keys, or ``None`` for "forget everything".
Applier = Callable[[frozenset[str] | None], None]
_appliers: list[Applier] = []
_lock = threading.Lock()
_generation = 0


def register(applier: Applier) -> None:
    """Let a cache hear about invalidations (caches register themselves when their module is imported)."""
    _appliers.append(applier)


def generation() -> int:
    return _generation


def apply(keys: Iterable[str] | None) -> None:
    """Drop what ``keys`` name from every cache of this process (``None``: drop everything)."""
    global _generation
    chosen = None if keys is None else frozenset(keys)
    if chosen is not None and not chosen:
        return
    with _lock:
        _generation += 1
    for applier in _appliers:
        applier(chosen)


def store_allowed(loaded_at_generation: int) -> bool:
    """Whether an entry loaded when the generation was ``loaded_at_generation`` may be cached now."""
    return loaded_at_generation == _generation and healthy()


def healthy() -> bool:
    """Whether caches may serve: the log has been followed recently enough (see the module docstring)."""
    return get_backend().healthy()


def publish(*keys: str) -> None:
    """Invalidate ``keys`` everywhere once the current transaction commits (at once outside a transaction)."""
    chosen = sorted(set(keys))
    if not chosen:
        return

    def send() -> None:
        apply(chosen)
        try:
            get_backend().publish(chosen)
        except Exception:
            # The change is committed; other processes see it when their entries reach their maximum age.
            logger.exception("could not publish cache invalidation %s", " ".join(chosen))

    transaction.on_commit(send)


class LocalInvalidation:
    """One process: publishing has already applied the keys; there is nothing to follow."""

    def __init__(self, **options: Any) -> None:
        pass

    def publish(self, keys: list[str]) -> None:
        pass

    def healthy(self) -> bool:
        return True

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _Follower:
    """A daemon thread following a shared log; subclasses read it (``_connect``, ``_read``)."""

    def __init__(self) -> None:
        # Marks what this process published: publishing applied it already, its echo from the log is skipped.
        self.origin = secrets.token_hex(8)
        self._heard = 0.0  # monotonic time of the last successful read; 0: not following
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._start_lock = threading.Lock()

    def healthy(self) -> bool:
        self.start()
        return time.monotonic() - self._heard < float(mcp_settings.INVALIDATION_STALENESS_SECONDS)

    def start(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._stop.clear()
                thread = threading.Thread(target=self._follow, name=f"mcp-{type(self).__name__}", daemon=True)
                thread.start()
                self._thread = thread

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        self._heard = 0.0

    def wait_healthy(self, timeout: float) -> bool:
        """For tests and start-up: wait (bounded) until the follower has caught up with the log."""
        self.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            self._stop.wait(0.01)
        return False

    def _follow(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                cursor = self._connect()
                # Whatever was published while we were not following is unknown: forget everything.
                apply(None)
                self._heard = time.monotonic()
                _health.succeeded()
                failures = 0
                while not self._stop.is_set():
                    cursor, keys = self._read(cursor)
                    if keys:
                        apply(keys)
                    self._heard = time.monotonic()
            except Exception as error:
                self._heard = 0.0
                failures += 1
                _health.failed(error)
                self._disconnect()
                self._stop.wait(min(0.05 * failures, 1.0))
        self._disconnect()

    def _connect(self) -> Any:
        raise NotImplementedError

    def _read(self, cursor: Any) -> tuple[Any, list[str]]:
        raise NotImplementedError

    def _disconnect(self) -> None:
        pass


class RedisInvalidation(RedisBacked, _Follower):
    """A capped Redis stream, read with a blocking ``XREAD`` (``BLOCK_MS`` at a time)."""

    def __init__(self, *, url: str, key: str = "mcp:invalidation", max_length: int = 10_000, block_ms: int = 250):
        RedisBacked.__init__(self, url, key)
        _Follower.__init__(self)
        self._max_length = max_length
        self._block_ms = block_ms

    def _reader(self) -> Any:
        # The socket timeout must outlast a blocking read, or every idle read would end in a timeout error.
        return self._sync_client(socket_timeout=self._block_ms / 1000 + 2.0)

    def publish(self, keys: list[str]) -> None:
        self._sync_client().xadd(
            self._prefix, {"k": " ".join(keys), "o": self.origin}, maxlen=self._max_length, approximate=True
        )

    def _connect(self) -> Any:
        newest = self._reader().xrevrange(self._prefix, count=1)
        return newest[0][0] if newest else b"0-0"

    def _read(self, cursor: Any) -> tuple[Any, list[str]]:
        answer = self._reader().xread({self._prefix: cursor}, block=self._block_ms, count=500)
        keys: list[str] = []
        for _stream, entries in answer or ():
            for entry_id, fields in entries:
                cursor = entry_id
                if fields.get(b"o") != self.origin.encode():
                    keys.extend((fields.get(b"k") or b"").decode().split())
        return cursor, keys


def _log_model() -> Any:
    # The log's table is a model, and models publish here: the model is looked up in Django's app registry
    # when the backend is used, so that this module stays below ``mcp_app.models`` (no import cycle).
    return apps.get_model("mcp_app", "CacheInvalidation")


class DatabaseInvalidation(_Follower):
    """The ``CacheInvalidation`` table, polled every ``poll_seconds``; rows older than ``keep_seconds`` go."""

    def __init__(self, *, poll_seconds: float = 0.1, keep_seconds: float = 300.0) -> None:
        super().__init__()
        self._poll = poll_seconds
        self._keep = keep_seconds
        self._published = 0

    def publish(self, keys: list[str]) -> None:
        CacheInvalidation = _log_model()
        CacheInvalidation.objects.create(keys=" ".join(keys), origin=self.origin)
        self._published += 1
        if self._published % 100 == 1:
            CacheInvalidation.objects.filter(created_at__lt=timezone.now() - timedelta(seconds=self._keep)).delete()

    def _connect(self) -> Any:
        CacheInvalidation = _log_model()
        close_old_connections()
        return CacheInvalidation.objects.aggregate(newest=Max("pk"))["newest"] or 0

    def _read(self, cursor: Any) -> tuple[Any, list[str]]:
        CacheInvalidation = _log_model()
        self._stop.wait(self._poll)
        keys: list[str] = []
        rows = CacheInvalidation.objects.filter(pk__gt=cursor).order_by("pk").values_list("pk", "keys", "origin")
        for pk, value, origin in rows[:500]:
            cursor = pk
            if origin != self.origin:
                keys.extend(value.split())
        return cursor, keys

    def _disconnect(self) -> None:
        connections.close_all()


INVALIDATION = "INVALIDATION"  # the name of the backend (mcp_app.backends)
_health = Health(INVALIDATION, "caches are bypassed until the log is followed again")


def get_backend() -> Any:
    """The ``INVALIDATION`` backend of this process."""
    return backends[INVALIDATION]


@on_reload
def forget_everything() -> None:
    """Settings changed (the manager stopped the follower): what it did not hear about is unknown."""
    apply(None)
