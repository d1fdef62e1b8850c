"""Heartbeats: which processes are alive and which queues workers consume, known without asking anyone
(docs/workers.md, "Worker death, deadlines, the reaper: liveness").

- A process that owns records (``ToolTask.owner``) beats: a daemon thread records its owner id every
  ``HEARTBEAT_INTERVAL_SECONDS``, and a Celery worker's queues (``consume``). It starts with ``start()`` or at a
  process's first ``owner()``, whose first beat the thread makes (the request path never waits for Redis).
- ``dead(owners)``: owners of this host whose process is gone or a zombie, and owners silent for
  ``HEARTBEAT_TIMEOUT_SECONDS`` (judged only once this process's own beats have succeeded for a whole timeout).
- ``consumers(queue)``: how many worker processes consuming ``queue`` beat within the timeout (``None``: unknown);
  ``every(interval, job)``: a periodic job run by the same thread (the sweeps of ``workers.serving.liveness``).

Backends (``HEARTBEAT`` of ``mcp_app.backends``): ``LocalHeartbeats`` (one process; pid checks on this host) and
``RedisHeartbeats`` (sorted sets scored by Redis's own clock). Not owned here: what is done about a dead owner
(``runtime.durable.recover_orphaned_tasks``, ``workers.serving.liveness``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .backends import REDIS_NOW, Health, RedisBacked, backends
from .conf import mcp_settings, on_reload
from .database import log_failure
from .process import owner_id, owner_is_dead

logger = logging.getLogger("mcp_app.heartbeat")

# Owners silent for this long are forgotten (their records were recovered long before).
FORGET_AFTER_MS = 24 * 3600 * 1000
HEARTBEAT = "HEARTBEAT"  # the name of the backend (mcp_app.backends)
_health = Health(HEARTBEAT, "no owner is judged dead by its heartbeat meanwhile")


class LocalHeartbeats:
    """One process: this process is alive; others on this host are judged by their pid (zombies are dead)."""

    shared = False

    def __init__(self, **_options: Any) -> None:
        pass

    def beat(self, owner: str, queues: Iterable[str]) -> None:
        return None

    def leave(self, owner: str, queues: Iterable[str]) -> None:
        return None

    def dead(self, owners: Iterable[str], timeout: float) -> set[str]:
        return set()  # nothing shared: only the pid check of ``dead()`` applies

    def consumers(self, queue: str, timeout: float) -> int | None:
        return None


_BEAT = (
    REDIS_NOW
    + """
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[i], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return now
"""
)

_DEAD = (
    REDIS_NOW
    + """
local oldest = now - tonumber(ARGV[1])
local dead = {}
for i = 2, #ARGV do
  local seen = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if seen and tonumber(seen) < oldest then dead[#dead + 1] = ARGV[i] end
end
return dead
"""
)

_COUNT = REDIS_NOW + "return redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[1]), '+inf')\n"


class RedisHeartbeats(RedisBacked):
    """Beats in Redis: ``<prefix>:owners`` (every owner, scored by its last beat) and ``<prefix>:queue:<name>``
    (the worker processes consuming a queue)."""

    shared = True

    def __init__(self, url: str, prefix: str = "mcp:live", **_options: Any) -> None:
        super().__init__(url, prefix)

    def _owners(self) -> str:
        return f"{self._prefix}:owners"

    def _queue(self, name: str) -> str:
        return f"{self._prefix}:queue:{name}"

    def beat(self, owner: str, queues: Iterable[str]) -> None:
        self._sync_script(_BEAT)(keys=[self._owners(), *map(self._queue, queues)], args=[owner, FORGET_AFTER_MS])

    def leave(self, owner: str, queues: Iterable[str]) -> None:
        for queue in queues:
            self._sync_client().zrem(self._queue(queue), owner)

    def dead(self, owners: Iterable[str], timeout: float) -> set[str]:
        asked = sorted(set(owners))
        if not asked:
            return set()
        found = self._sync_script(_DEAD)(keys=[self._owners()], args=[int(timeout * 1000), *asked])
        return {item.decode() if isinstance(item, bytes) else str(item) for item in found}

    def consumers(self, queue: str, timeout: float) -> int | None:
        return int(self._sync_script(_COUNT)(keys=[self._queue(queue)], args=[int(timeout * 1000)]))


class _Pulse:
    """This process's heartbeat thread and its periodic jobs."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.pid = os.getpid()
        self.queues: set[str] = set()
        self.jobs: list[list[Any]] = []  # [interval, job, next run (monotonic)]
        self.healthy_since: float | None = None
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.first_beat_in_thread = False
        self.thread = threading.Thread(target=self._run, name="mcp-heartbeat", daemon=True)

    def beat_once(self) -> None:
        try:
            self.backend.beat(owner_id(), sorted(self.queues))
        except Exception as error:
            self.healthy_since = None
            _health.failed(error)
            return
        if self.healthy_since is None:
            self.healthy_since = time.monotonic()
        _health.succeeded()

    def _run(self) -> None:
        interval = float(mcp_settings.HEARTBEAT_INTERVAL_SECONDS)
        if self.first_beat_in_thread:
            self.beat_once()
        while not self.stopped.wait(interval):
            self.beat_once()
            now = time.monotonic()
            with self.lock:
                due = [entry for entry in self.jobs if entry[2] <= now]
                for entry in due:
                    entry[2] = now + entry[0]
            for _interval, job, _next in due:
                try:
                    job()
                except Exception:
                    log_failure(logger, "a periodic job of the heartbeat thread failed")


_pulse: _Pulse | None = None
_lock = threading.Lock()


def backend() -> Any:
    """The ``HEARTBEAT`` backend of this process."""
    return backends[HEARTBEAT]


def _running(*, beat_now: bool = True) -> _Pulse:
    """This process's pulse, started (its first beat made here, or by its thread at once with ``beat_now=False``)
    if it is not running yet. A forked child (a prefork pool process) starts its own: threads do not survive
    ``fork``."""
    global _pulse
    pulse = _pulse
    if pulse is not None and pulse.pid == os.getpid():
        return pulse
    with _lock:
        if _pulse is None or _pulse.pid != os.getpid():
            fresh = _Pulse(backend())
            if beat_now:
                fresh.beat_once()
            else:
                fresh.first_beat_in_thread = True
            fresh.thread.start()
            _pulse = fresh
        return _pulse


def start() -> None:
    """Beat from now on (idempotent)."""
    _running()


def owner() -> str:
    """This process's owner id for a record it is about to own; the process beats from now on (its first beat
    made at once by the thread: this is called on request paths, which must not wait for Redis)."""
    _running(beat_now=False)
    return owner_id()


def consume(queues: Iterable[str]) -> None:
    """This process (a Celery worker's main process) consumes ``queues``: beat for them too, at once."""
    pulse = _running()
    pulse.queues.update(queues)
    pulse.beat_once()


def stop_consuming() -> None:
    """A worker shutting down: it no longer counts as a consumer of its queues (its owner id still beats until
    the process exits, so its last calls finish undisturbed)."""
    pulse = _pulse
    if pulse is None or pulse.pid != os.getpid():
        return
    queues, pulse.queues = sorted(pulse.queues), set()
    with contextlib.suppress(Exception):
        pulse.backend.leave(owner_id(), queues)


def every(interval: float, job: Callable[[], Any]) -> None:
    """Run ``job`` about every ``interval`` seconds on the heartbeat thread (errors are logged)."""
    pulse = _running()
    with pulse.lock:
        pulse.jobs.append([float(interval), job, time.monotonic() + float(interval)])


def dead(owners: Iterable[str], *, timeout: float | None = None, pid_check: bool = True) -> set[str]:
    """The owners among ``owners`` that are gone: those of this host whose process is gone or a zombie
    (``process.owner_is_dead``, known at once), and those that have not beaten within ``timeout`` (default
    ``HEARTBEAT_TIMEOUT_SECONDS``; judged only once this process has itself beaten successfully for a whole
    timeout; ``pid_check=False``: by the heartbeat alone). Raises when the backend is unreachable."""
    asked = set(owners)
    gone = {owner for owner in asked if owner_is_dead(owner)} if pid_check else set()
    limit = float(mcp_settings.HEARTBEAT_TIMEOUT_SECONDS if timeout is None else timeout)
    pulse = _running()
    healthy = pulse.healthy_since is not None and time.monotonic() - pulse.healthy_since >= float(
        mcp_settings.HEARTBEAT_TIMEOUT_SECONDS
    )
    if pulse.backend.shared and healthy and asked - gone:
        gone |= set(pulse.backend.dead(asked - gone, limit))
    return gone


def worker_queue() -> str | None:
    """The Celery queue of worker calls when they go to workers that beat in a shared backend (with
    ``REDIS_URL``), else ``None``: its consumers are not known here."""
    if mcp_settings.WORKER_DISPATCH == "in_process" or not getattr(backend(), "shared", False):
        return None
    if mcp_settings.WORKER_QUEUE:
        return str(mcp_settings.WORKER_QUEUE)
    from celery import current_app

    return str(current_app.conf.task_default_queue or "celery")


def consumers(queue: str) -> int | None:
    """Worker processes consuming ``queue`` that have beaten within the timeout (``None``: not known here)."""
    return backend().consumers(queue, float(mcp_settings.HEARTBEAT_TIMEOUT_SECONDS))


@on_reload
def reset() -> None:
    """Settings changed (tests): the pulse stops, and the next use starts one on the backend of the new settings."""
    global _pulse
    with _lock:
        if _pulse is not None:
            _pulse.stopped.set()
        _pulse = None
