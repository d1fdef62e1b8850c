"""The upstream connections of this process: one per upstream (and configuration revision) and event loop.

``pool()`` is this loop's ``Pool``: ``connection(endpoint)`` the live connection every call shares (opened once for
concurrent first calls), ``slot(endpoint)`` the turns of at most ``UPSTREAM_MAX_CONCURRENT_CALLS`` calls in flight,
``discard`` for a broken one. Each connection is held by a task of its own in an empty context, hears its
upstream's ``list_changed``, and closes when idle or when its upstream changes. Design: docs/upstreams.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from .. import invalidation
from ..conf import mcp_settings
from ..definitions.upstreams import UpstreamEndpoint
from .connection import UpstreamUnavailable, open_client

logger = logging.getLogger("mcp_app.federation")


@dataclass(eq=False)
class Connection:
    endpoint: UpstreamEndpoint
    client: Any = None
    used_at: float = field(default_factory=time.monotonic)
    broken: bool = False
    # The fast path's kept-alive links and request head (``fastcall.Fast``), made on its first call.
    fast: Any = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)
    _holder: asyncio.Task[None] | None = None

    @property
    def modern(self) -> bool:
        return bool(self.client is not None and self.client.session.discover_result is not None)

    def close(self) -> None:
        """Close it: the fast path's idle links at once (a link in use when its call ends), the SDK's client by
        its holder task."""
        self._closing.set()
        if self.fast is not None:
            self.fast.close()


class Pool:
    """The connections of one event loop."""

    def __init__(self) -> None:
        self._connections: dict[tuple[int, str], Connection] = {}
        self._opening: dict[tuple[int, str], asyncio.Future[Connection]] = {}
        self._slots: dict[tuple[int, int], asyncio.Semaphore] = {}

    def slot(self, endpoint: UpstreamEndpoint) -> asyncio.Semaphore:
        """The turns of calls to ``endpoint``'s upstream (acquire one per call; FIFO, as asyncio's are)."""
        limit = max(int(mcp_settings.UPSTREAM_MAX_CONCURRENT_CALLS), 1)
        key = (endpoint.pk, limit)
        found = self._slots.get(key)
        if found is None:
            found = self._slots[key] = asyncio.Semaphore(limit)
        return found

    async def connection(self, endpoint: UpstreamEndpoint) -> Connection:
        """A live connection to ``endpoint``, opened if needed; raises ``UpstreamUnavailable``."""
        self._expire()
        key = endpoint.key
        held = self._connections.get(key)
        if held is not None and not held.broken:
            held.used_at = time.monotonic()
            return held
        opening = self._opening.get(key)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            connection = await self._open(endpoint)
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else UpstreamUnavailable("cancelled"))
            future.exception()  # retrieved: waiters re-raise it, nobody else needs to
            raise
        finally:
            self._opening.pop(key, None)
        for stale in [k for k in self._connections if k[0] == endpoint.pk and k != key]:
            self._connections.pop(stale).close()
        self._connections[key] = connection
        future.set_result(connection)
        return connection

    def discard(self, connection: Connection) -> None:
        """Stop using ``connection`` (it failed): the next call opens another."""
        connection.broken = True
        if self._connections.get(connection.endpoint.key) is connection:
            del self._connections[connection.endpoint.key]
        connection.close()

    def drop(self, pks: frozenset[int] | None) -> None:
        """Close the connections of the upstreams ``pks`` (``None``: all of them)."""
        for key, connection in list(self._connections.items()):
            if pks is None or key[0] in pks:
                del self._connections[key]
                connection.close()

    async def _open(self, endpoint: UpstreamEndpoint) -> Connection:
        from .sync import changed

        connection = Connection(endpoint)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            try:
                async with open_client(endpoint, on_list_changed=changed, log_everything=True) as client:
                    connection.client = client
                    ready.set_result(None)
                    watcher = asyncio.ensure_future(_watch(client, endpoint.pk)) if connection.modern else None
                    try:
                        await connection._closing.wait()
                    finally:
                        if watcher is not None:
                            watcher.cancel()
                            await asyncio.gather(watcher, return_exceptions=True)
            except BaseException as exc:
                connection.broken = True
                if not ready.done():
                    ready.set_exception(exc if isinstance(exc, Exception) else UpstreamUnavailable("cancelled"))
                elif not isinstance(exc, asyncio.CancelledError):
                    logger.info("connection to upstream %s ended: %s", endpoint.name, type(exc).__name__)
            finally:
                connection.broken = True
                if connection.fast is not None:
                    connection.fast.close()
                if self._connections.get(endpoint.key) is connection:
                    del self._connections[endpoint.key]

        # In a context of its own: the holder's tasks (the standalone stream's reader among them) must not inherit the
        # first caller's ``relay.current``, or what the upstream sends outside any call would reach that call.
        connection._holder = asyncio.get_running_loop().create_task(
            hold(), name=f"mcp-upstream-{endpoint.pk}", context=contextvars.Context()
        )
        _holders.add(connection._holder)
        connection._holder.add_done_callback(_holders.discard)
        try:
            await asyncio.shield(ready)
        except asyncio.CancelledError:
            connection.close()
            raise
        return connection

    def _expire(self) -> None:
        idle = float(mcp_settings.UPSTREAM_POOL_IDLE_SECONDS)
        now = time.monotonic()
        for key, connection in list(self._connections.items()):
            if connection.broken or now - connection.used_at > idle:
                del self._connections[key]
                connection.close()


async def _watch(client: Any, pk: int) -> None:
    """A 2026-07-28 upstream announces list changes on ``subscriptions/listen`` (handshake-era upstreams send
    them on the session's stream, which the connection's message handler hears): listen while connected."""
    from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ToolsListChanged

    from .sync import changed

    capabilities = client.server_capabilities
    wanted = {
        "tools_list_changed": bool(capabilities.tools and capabilities.tools.list_changed),
        "prompts_list_changed": bool(capabilities.prompts and capabilities.prompts.list_changed),
        "resources_list_changed": bool(capabilities.resources and capabilities.resources.list_changed),
    }
    if not any(wanted.values()):
        return
    kinds = {ToolsListChanged: "tools", PromptsListChanged: "prompts", ResourcesListChanged: "resources"}
    try:
        async with client.listen(**wanted) as subscription:
            async for event in subscription:
                kind = kinds.get(type(event))
                if kind is not None:
                    changed(pk, kind)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the upstream does not serve subscriptions/listen after all, or dropped it
        logger.info("upstream %s: no list_changed subscription (%s)", pk, type(exc).__name__)


_holders: set[asyncio.Task[None]] = set()
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pool] = weakref.WeakKeyDictionary()


def _heard(keys: frozenset[str] | None) -> None:
    """An invalidation (from any thread): close the named upstreams' connections, each on its own loop. "Forget
    everything" (``None``) closes nothing: it says cached reads may be stale, not that an upstream changed, and closing
    would fail every call in flight (an edited upstream's connection is not reused anyway: its revision changed)."""
    if keys is None:
        return
    pks = frozenset(int(key[9:]) for key in keys if key.startswith("upstream:"))
    if not pks:
        return
    for loop, found in list(_pools.items()):
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(found.drop, pks)


invalidation.register(_heard)


def pool() -> Pool:
    """This event loop's pool."""
    loop = asyncio.get_running_loop()
    found = _pools.get(loop)
    if found is None:
        found = _pools[loop] = Pool()
    return found


async def close() -> None:
    """Close this loop's connections and wait (bounded) until they are closed (tests, shutdown)."""
    loop = asyncio.get_running_loop()
    found = _pools.pop(loop, None)
    if found is None:
        return
    holders = [c._holder for c in found._connections.values() if c._holder is not None]
    found.drop(None)
    if holders:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*holders, return_exceptions=True), timeout=5)
