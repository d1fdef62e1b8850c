"""Shared state behind one manager: each backend of state that processes share, by name (the names, their
defaults and what losing each costs: docs/architecture.md, "Where shared state lives").

``MCP_APP["BACKENDS"]`` maps a name to ``{"BACKEND": dotted path, "OPTIONS": {...}}``; a name it leaves out keeps
its embedded default (``DEFAULT_BACKENDS`` in ``mcp_app.conf``). In the shape of Channels' ``ChannelLayerManager``:

- ``backends[name]``: the backend, built from the settings on first use (once per process, thread-safe), forgotten
  (and ``stop()``-ped) when ``MCP_APP`` changes; ``backends.set(name, backend) -> previous``: one put in place by
  tests until set back (``set(name, None)``);
- ``RedisBacked``: the base of every Redis backend (``url``, key ``prefix``, the clients and scripts of ``redis_pool``);
- ``Health(name, consequence)``: the one tracker of a piece of shared state being unreachable, which logs an
  outage's start (with what this process does meanwhile) and end; ``attempt`` and ``attempt_sync`` answer a
  fallback meanwhile.

Not owned here: the Redis clients (``redis_pool``) and Django's own shared state (the cache, the channel layer,
the Celery broker: the project's settings).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .conf import DEFAULT_BACKENDS, mcp_settings, on_reload

logger = logging.getLogger("mcp_app.backends")

T = TypeVar("T")


class BackendManager:
    """Named backends of shared state, built lazily from ``MCP_APP["BACKENDS"]`` (see the module docstring)."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}
        self._set: dict[str, Any] = {}
        self._lock = threading.Lock()

    @staticmethod
    def configs() -> dict[str, dict[str, Any]]:
        return {**DEFAULT_BACKENDS, **mcp_settings.BACKENDS}

    def make_backend(self, name: str) -> Any:
        config = self.configs()[name]
        try:
            backend_class = import_string(config["BACKEND"])
        except ImportError as error:
            raise ImproperlyConfigured(f"Cannot import the backend {config['BACKEND']!r} of {name}.") from error
        return backend_class(**config.get("OPTIONS", {}))

    def __getitem__(self, name: str) -> Any:
        found = self._set.get(name, self._built.get(name))
        if found is None:
            with self._lock:
                found = self._set.get(name, self._built.get(name))
                if found is None:
                    found = self._built[name] = self.make_backend(name)
        return found

    def set(self, name: str, backend: Any) -> Any:
        """Use ``backend`` for ``name`` until set again (see the module docstring); returns the one it replaces."""
        with self._lock:
            old = self._set.pop(name, None)
            if old is None:
                old = self._built.pop(name, None) if backend is None else self._built.get(name)
            if backend is not None:
                self._set[name] = backend
        _forget_outages([name])
        return old

    def reset(self) -> None:
        """Forget the backends built from the settings (stopping those that run a thread)."""
        with self._lock:
            built, self._built = self._built, {}
        _forget_outages(built)
        for backend in built.values():
            stop = getattr(backend, "stop", None)
            if stop is not None:
                stop()


backends = BackendManager()
on_reload(backends.reset)


# The first lines of a Lua script that reads the time from Redis itself (``now``, in milliseconds), so that the
# processes' clocks never matter.
REDIS_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""


def redis_ms(seconds: float) -> int:
    """``seconds`` as a scripts' argument: whole milliseconds, at least 1."""
    return max(1, int(seconds * 1000))


class RedisBacked:
    """A backend in Redis at ``url``, its keys under ``prefix``. ``redis_pool`` is imported on first use, so that
    the embedded default runs without redis-py."""

    def __init__(self, url: str, prefix: str) -> None:
        self._url = url
        self._prefix = prefix

    def same_server(self, other: RedisBacked) -> bool:
        """Whether ``other`` lives in the same Redis (one script may then touch the keys of both)."""
        return self._url == other._url

    def _client(self, socket_timeout: float | None = None) -> Any:
        """The running event loop's client (``redis_pool.redis_client``)."""
        from .redis_pool import SOCKET_TIMEOUT_SECONDS, redis_client

        return redis_client(self._url, socket_timeout=socket_timeout or SOCKET_TIMEOUT_SECONDS)

    def _sync_client(self, socket_timeout: float | None = None) -> Any:
        """The process's blocking client (``redis_pool.sync_redis_client``)."""
        from .redis_pool import SOCKET_TIMEOUT_SECONDS, sync_redis_client

        return sync_redis_client(self._url, socket_timeout=socket_timeout or SOCKET_TIMEOUT_SECONDS)

    def _script(self, source: str) -> Any:
        """The Lua ``source`` on the running event loop's client."""
        from .redis_pool import script

        return script(self._client(), source)

    def _sync_script(self, source: str) -> Any:
        """The Lua ``source`` on the process's blocking client."""
        from .redis_pool import script

        return script(self._sync_client(), source)


_trackers: dict[str, Health] = {}


class Health:
    """Whether one piece of shared state answered its last operation (see the module docstring)."""

    def __init__(self, name: str, consequence: str) -> None:
        self.name = name
        self.consequence = consequence  # what this process does while it is unreachable, for the log
        self.down_since: float | None = None
        _trackers[name] = self

    @property
    def up(self) -> bool:
        return self.down_since is None

    def failed(self, error: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            logger.warning(
                "shared state %s is unavailable (%s: %s); %s", self.name, type(error).__name__, error, self.consequence
            )

    def succeeded(self) -> None:
        if self.down_since is not None:
            logger.warning(
                "shared state %s is available again after %.1f s", self.name, time.monotonic() - self.down_since
            )
            self.down_since = None

    async def attempt(self, operation: Awaitable[T], fallback: Callable[[], T]) -> T:
        """``await operation``, or ``fallback()`` when it fails (the outage noted)."""
        try:
            found = await operation
        except Exception as error:
            self.failed(error)
            return fallback()
        self.succeeded()
        return found

    def attempt_sync(self, operation: Callable[[], T], fallback: Callable[[], T]) -> T:
        """``operation()``, or ``fallback()`` when it fails (the outage noted)."""
        try:
            found = operation()
        except Exception as error:
            self.failed(error)
            return fallback()
        self.succeeded()
        return found


def _forget_outages(names: Iterable[str]) -> None:
    """The backends of ``names`` were replaced: what was known of their outages is moot."""
    for name in names:
        tracker = _trackers.get(name)
        if tracker is not None:
            tracker.down_since = None
