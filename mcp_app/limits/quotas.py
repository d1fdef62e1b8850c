"""Leases: at most N of a tenant's, and M of an agent's, worker calls (or streams) held at once.

The API (the seam between the transport, the worker runner and the reaper; design: docs/quotas.md):

- ``acquire(call_id, *, tenant_pk, agent_pk, tenant_limit, agent_limit) -> Lease``: admit one call, atomically
  across processes (a ``call_id`` that holds a slot is admitted again without a second one), or raise
  ``QuotaExceeded`` (-32010, naming the scope and its limit). ``Lease.release()`` / ``release_sync()`` give it back.
- ``release_call(call_id)`` (sync): give back a call's slot from a process that holds no ``Lease`` (worker, reaper).
- ``limits_for(grant, token entry or principal)``: the effective (tenant, agent) limits, no query; 0: unlimited.
- ``running_calls(tenants=..., agents=...)`` (sync): how many calls hold a slot now, for the admin.

Backends (``WORKER_QUOTAS``, ``STREAM_CAPS``): ``LocalQuotas`` (this process's memory, the embedded default) and
``RedisQuotas`` (``limits.redis_quotas``); an unreachable backend refuses admission. Not owned here: where calls
are admitted (``workers.serving.admission``), the limits' storage (``Tenant``/``Agent.max_worker_calls``) and their admin.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..backends import backends
from ..conf import mcp_settings
from ..observability import metrics
from ..protocol.errors import QuotaExceeded, ServiceUnavailable
from .redis_quotas import RedisQuotas

__all__ = [
    "Lease",
    "LocalQuotas",
    "QuotaBackend",
    "QuotaExceeded",
    "RedisQuotas",
    "acquire",
    "effective",
    "get_quotas",
    "limits_for",
    "release_call",
    "running_calls",
]

logger = logging.getLogger("mcp_app.limits")

TENANT = "tenant"
AGENT = "agent"
WORKER_CALLS = "worker-call admission"


def effective(own: int | None, default: int) -> int:
    """A tenant's or agent's own limit, else the setting's; 0: unlimited."""
    return max(0, int(default if own is None else own))


def limits_for(holder: Any) -> tuple[int, int]:
    """The effective (tenant, agent) limits of concurrent worker calls, 0 = unlimited, for an ``AccessGrant``,
    a ``TokenEntry`` or a ``Principal`` (which carries them already). Reads the cached snapshot and the
    settings: no query."""
    limits = getattr(holder, "worker_call_limits", None)
    if limits is not None:
        return (int(limits[0]), int(limits[1]))
    token = getattr(holder, "token", holder)
    return (
        effective(token.tenant_max_worker_calls, mcp_settings.WORKER_CALLS_PER_TENANT),
        effective(token.agent_max_worker_calls, mcp_settings.WORKER_CALLS_PER_AGENT),
    )


class QuotaBackend(Protocol):
    """Where slots live: ``LocalQuotas`` or ``RedisQuotas``. ``acquire``
    returns ``None`` when admitted, else the scope that refused (``"tenant"`` or ``"agent"``); ``renew`` whether
    the lease was still held; every method may raise the backend's connection errors."""

    async def check(self) -> None: ...

    async def acquire(
        self, call_id: str, tenant_pk: int, agent_pk: int, tenant_limit: int, agent_limit: int, ttl: float
    ) -> str | None: ...

    async def renew(self, call_id: str, tenant_pk: int, agent_pk: int, ttl: float) -> bool: ...

    async def release(self, call_id: str, tenant_pk: int, agent_pk: int) -> None: ...

    def release_sync(self, call_id: str) -> None: ...

    def running(self, tenants: list[int], agents: list[int]) -> tuple[dict[int, int], dict[int, int]]: ...


class Lease:
    """One held slot (a worker call's, a stream's): renewed in the background while held (by the one renewal task
    of the event loop it was taken in, ``_Renewals``), given back by ``release``. ``what`` names it in logs;
    ``gauge`` counts held leases."""

    __slots__ = (
        "_backend",
        "_gauge",
        "_released",
        "_renewals",
        "_ttl",
        "_what",
        "agent_pk",
        "call_id",
        "due",
        "tenant_pk",
    )

    def __init__(
        self,
        backend: QuotaBackend,
        call_id: str,
        tenant_pk: int,
        agent_pk: int,
        ttl: float,
        what: str,
        gauge: Callable[[int], None] | None = None,
    ) -> None:
        self.call_id, self.tenant_pk, self.agent_pk = call_id, tenant_pk, agent_pk  # what the backend counts
        self._backend = backend
        self._ttl = ttl
        self._what = what
        self._gauge = gauge
        self._released = False
        self.due = 0.0  # loop time of its next renewal
        if gauge is not None:
            gauge(1)
        self._renewals: _Renewals | None = _renewals()
        self._renewals.add(self)

    @property
    def released(self) -> bool:
        return self._released

    async def _renew(self) -> None:
        """One renewal (``_Renewals``'s): a failure is logged (the next may succeed; the lease outlives a few), a
        lease no longer held is no longer counted."""
        try:
            held = await self._backend.renew(self.call_id, self.tenant_pk, self.agent_pk, self._ttl)
        except Exception as error:
            logger.warning("could not renew the %s %s: %s", self._what, self.call_id, error)
            return
        if not held and not self._released:
            logger.info("%s %s was released elsewhere or expired; no longer counted", self._what, self.call_id)
            self._mark_released()

    def _mark_released(self) -> bool:
        if self._released:
            return False
        self._released = True
        if self._gauge is not None:
            self._gauge(-1)
        renewals, self._renewals = self._renewals, None
        if renewals is not None:
            renewals.discard(self)
        return True

    async def release(self) -> None:
        """Give the slot back (idempotent). Failures are logged: the lease then expires by itself."""
        if not self._mark_released():
            return
        try:
            # Shielded: a release awaited in a ``finally`` of a call cancelled again still completes.
            await asyncio.shield(self._backend.release(self.call_id, self.tenant_pk, self.agent_pk))
        except Exception as error:
            self._log_release_failure(error)

    def released_elsewhere(self) -> None:
        """Another process gave the slot back (a worker, before announcing the call's end): stop holding it."""
        self._mark_released()

    def release_sync(self) -> None:
        """``release`` for synchronous code (any thread)."""
        if not self._mark_released():
            return
        try:
            self._backend.release_sync(self.call_id)
        except Exception as error:
            self._log_release_failure(error)

    def _log_release_failure(self, error: Exception) -> None:
        logger.warning("could not release the %s %s (it expires by itself): %s", self._what, self.call_id, error)

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Lease {self.call_id} tenant={self.tenant_pk} agent={self.agent_pk} {state}>"


class _Renewals:
    """The held leases of one event loop, renewed by one task (none without leases): a lease is due a third of
    its lease time after it was taken, then after its last renewal. The leases of one interval are due in the
    order they were queued, so each interval keeps an ordered dict and the task sleeps until the first lease of
    any interval is due; the leases due together are renewed concurrently."""

    def __init__(self) -> None:
        self._queues: dict[float, dict[Lease, None]] = {}  # interval: its leases, in the order they are due
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None  # the task's sleep, cut short by a new interval

    def add(self, lease: Lease) -> None:
        loop = asyncio.get_running_loop()
        interval = lease._ttl / 3
        lease.due = loop.time() + interval
        queue = self._queues.get(interval)
        if queue is None:  # due perhaps before what the task sleeps for
            queue = self._queues[interval] = {}
            if self._wakeup is not None and not self._wakeup.done():
                self._wakeup.set_result(None)
        queue[lease] = None
        if self._task is None:
            # A context of its own: the task renews the leases of many requests, none of whose log context is its.
            self._task = loop.create_task(self._run(), context=contextvars.Context())

    def discard(self, lease: Lease) -> None:
        """``lease`` is no longer held (from any thread)."""
        task = self._task
        if task is None:
            return
        loop = task.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._remove(lease)
        else:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing left to renew
                loop.call_soon_threadsafe(self._remove, lease)

    def _remove(self, lease: Lease) -> None:
        interval = lease._ttl / 3
        queue = self._queues.get(interval)
        if queue is not None:
            queue.pop(lease, None)
            if not queue:
                del self._queues[interval]

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queues:
                now = loop.time()
                first = min(next(iter(queue)).due for queue in self._queues.values())
                if first > now:
                    self._wakeup = loop.create_future()
                    timer = loop.call_at(first, _wake, self._wakeup)
                    try:
                        await self._wakeup
                    finally:
                        timer.cancel()
                        self._wakeup = None
                    continue
                due = []
                for interval, queue in self._queues.items():
                    while queue:
                        lease = next(iter(queue))
                        if lease.due > now:
                            break
                        del queue[lease]  # to the end: due last, one interval from now
                        queue[lease] = None
                        lease.due = now + interval
                        due.append(lease)
                await asyncio.gather(*(lease._renew() for lease in due))
        finally:
            self._task = None


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_loops_renewals: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Renewals] = weakref.WeakKeyDictionary()


def _renewals() -> _Renewals:
    """The ``_Renewals`` of the running loop."""
    loop = asyncio.get_running_loop()
    found = _loops_renewals.get(loop)
    if found is None:
        found = _loops_renewals[loop] = _Renewals()
    return found


async def take(
    backend: QuotaBackend, lease_id: str, tenant_pk: int, agent_pk: int, limits: tuple[int, int], ttl: float, what: str
) -> str | None:
    """Take a slot of ``backend``: ``None`` when taken, else the scope that refused. Raises ``ServiceUnavailable``
    when the backend cannot be reached (a limit that cannot be checked is not lifted)."""
    try:
        refused: str | None = await backend.acquire(lease_id, tenant_pk, agent_pk, *limits, ttl)
    except Exception as error:
        logger.warning("%s: unavailable (%s: %s)", what, type(error).__name__, error)
        metrics.record_dependency_error("redis")
        raise ServiceUnavailable(f"Service unavailable: {what} cannot be checked; retry shortly") from error
    return refused


async def acquire(call_id: str, *, tenant_pk: int, agent_pk: int, tenant_limit: int, agent_limit: int) -> Lease:
    """Admit one worker call or raise ``QuotaExceeded``; see the module docstring. Must run in an event loop
    (the lease is renewed there)."""
    backend = get_quotas()
    ttl = float(mcp_settings.WORKER_CALL_LEASE_SECONDS)
    refused = await take(backend, call_id, tenant_pk, agent_pk, (tenant_limit, agent_limit), ttl, WORKER_CALLS)
    if refused is not None:
        metrics.worker_quota_refused(refused)
        raise QuotaExceeded(refused, tenant_limit if refused == TENANT else agent_limit)
    return Lease(backend, call_id, tenant_pk, agent_pk, ttl, "worker-call lease", metrics.worker_call_lease)


def release_call(call_id: str) -> None:
    """Give back the slot of ``call_id`` wherever it was admitted (idempotent; sync)."""
    get_quotas().release_sync(call_id)


def running_calls(*, tenants: Iterable[int] = (), agents: Iterable[int] = ()) -> tuple[dict[int, int], dict[int, int]]:
    """How many calls hold a slot now, per tenant pk and per agent pk (sync; one round trip)."""
    return get_quotas().running(list(tenants), list(agents))


class LocalQuotas:
    """One process's memory, under a lock (threads and event loops alike); the embedded default."""

    def __init__(self, **options: Any) -> None:
        self._lock = threading.Lock()
        # (scope, pk) -> {call id: monotonic expiry}
        self._sets: dict[tuple[str, int], dict[str, float]] = {}
        self._leases: dict[str, tuple[int, int]] = {}

    def _live(self, scope: str, pk: int, now: float) -> dict[str, float]:
        members = self._sets.setdefault((scope, pk), {})
        for call_id in [call_id for call_id, expiry in members.items() if expiry <= now]:
            del members[call_id]
            if scope == TENANT:
                self._leases.pop(call_id, None)  # expired: like Redis's lease key, it is gone
        return members

    def _forget_empty(self, *keys: tuple[str, int]) -> None:
        for key in keys:
            if not self._sets.get(key):
                self._sets.pop(key, None)

    async def check(self) -> None:
        pass

    async def acquire(
        self, call_id: str, tenant_pk: int, agent_pk: int, tenant_limit: int, agent_limit: int, ttl: float
    ) -> str | None:
        with self._lock:
            now = time.monotonic()
            tenant = self._live(TENANT, tenant_pk, now)
            agent = self._live(AGENT, agent_pk, now)
            if call_id not in tenant:
                if tenant_limit > 0 and len(tenant) >= tenant_limit:
                    self._forget_empty((AGENT, agent_pk))
                    return TENANT
                if agent_limit > 0 and len(agent) >= agent_limit:
                    self._forget_empty((TENANT, tenant_pk))
                    return AGENT
            tenant[call_id] = agent[call_id] = now + ttl
            self._leases[call_id] = (tenant_pk, agent_pk)
            return None

    async def renew(self, call_id: str, tenant_pk: int, agent_pk: int, ttl: float) -> bool:
        with self._lock:
            now = time.monotonic()
            tenant = self._sets.get((TENANT, tenant_pk), {})
            agent = self._sets.get((AGENT, agent_pk), {})
            if tenant.get(call_id, 0.0) <= now:
                return False
            tenant[call_id] = now + ttl
            if call_id in agent:
                agent[call_id] = now + ttl
            return True

    async def release(self, call_id: str, tenant_pk: int, agent_pk: int) -> None:
        self.release_sync(call_id)

    def release_sync(self, call_id: str) -> None:
        with self._lock:
            pks = self._leases.pop(call_id, None)
            if pks is None:
                return
            for key in ((TENANT, pks[0]), (AGENT, pks[1])):
                self._sets.get(key, {}).pop(call_id, None)
            self._forget_empty((TENANT, pks[0]), (AGENT, pks[1]))

    def running(self, tenants: list[int], agents: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        with self._lock:
            now = time.monotonic()

            def count(scope: str, pk: int) -> int:
                return sum(1 for expiry in self._sets.get((scope, pk), {}).values() if expiry > now)

            return {pk: count(TENANT, pk) for pk in tenants}, {pk: count(AGENT, pk) for pk in agents}


def get_quotas() -> QuotaBackend:
    """The ``WORKER_QUOTAS`` backend of this process."""
    found: QuotaBackend = backends["WORKER_QUOTAS"]
    return found
