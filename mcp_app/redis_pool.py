"""Redis connection pools and clients of a process: bounded, and idle connections closed (sizing Redis for them:
docs/deployment.md, "Redis connections").

- ``BoundedConnectionPool``: at most ``REDIS_MAX_CONNECTIONS`` connections (beyond, a command waits up to
  ``REDIS_POOL_WAIT_SECONDS``, then fails as Redis being unreachable: 503); one idle for ``REDIS_IDLE_SECONDS`` is
  closed. An idle connection is handed over at once when nobody waits for one. It belongs to the event loop it
  is used in.
- ``redis_client(url)``: the running loop's asyncio client on such a pool, for every backend of shared state and
  ``/readyz``; ``sync_redis_client(url)``: the process's blocking client (thread-safe), for the sync paths.
- ``script(client, source)``: the Lua ``source`` registered once on ``client``.
- ``pipelined(client, *commands)``: commands sent with every other ``pipelined`` call made on the same pool in
  the same turn of the event loop, in one pipeline: one round trip, and one pass through the pool, for the turn.
- ``redis_connection_options(...)``: the options of all of them and of the channel layer's pools (``redis_layer``).

Not owned here: Django's cache and Celery's broker, which the project configures.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from typing import Any

import redis.asyncio as redis
from redis.asyncio.connection import AbstractConnection, BlockingConnectionPool, ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.retry import Retry as BlockingRetry

from .conf import mcp_settings

CONNECT_TIMEOUT_SECONDS = 2.0


def redis_connection_options(*, socket_timeout: float, blocking: bool = False) -> dict[str, Any]:
    """redis-py connection options for the channel layer and every client made here (``blocking``: for the
    blocking client, whose retry is of its own kind): a short connect timeout and two quick retries, so a pooled
    connection that died with a Redis restart is replaced instead of failing its command, and a Redis that is down
    is reported in milliseconds (refused) or ``CONNECT_TIMEOUT_SECONDS`` (unreachable), never after a backoff."""
    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": (BlockingRetry if blocking else Retry)(ExponentialBackoff(cap=0.1, base=0.01), 2),
    }


class BoundedConnectionPool(BlockingConnectionPool):
    """redis-py's ``BlockingConnectionPool`` (at most ``max_connections``) that closes a connection idle for
    ``idle_seconds``: redis-py's own keeps every connection it opened for good, so a burst of GET streams ending at
    once would leave idle connections that fill Redis's ``maxclients`` and daphne's descriptors. A closed
    connection stays in the pool as an unconnected slot and reconnects on its next use.

    When a connected connection is idle and no command waits for one, ``get_connection`` and ``release`` skip
    redis-py's ``Condition``, wait timeout, reconnect-and-retry wrapper and wait-time metrics: on a busy process
    they cost more than the command (docs/performance.md, "SSE on PostgreSQL + Redis"). The bound and the order
    of waiters are unchanged: with a waiter, both go redis-py's way."""

    def __init__(self, *, idle_seconds: float, **options: Any) -> None:
        super().__init__(**options)
        self.idle_seconds = idle_seconds
        # The connections released and not taken again since, with when they were released.
        self._idle: dict[AbstractConnection, float] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None

    def _nobody_waits(self) -> bool:
        # asyncio.Condition keeps its waiters in ``_waiters`` (3.11-3.14); without it, always redis-py's way.
        return not getattr(self, "_in_maintenance", False) and not getattr(self._condition, "_waiters", True)

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        available = self._available_connections
        if available and self._nobody_waits():
            connection: AbstractConnection = available.pop()
            self._in_use_connections.add(connection)
            self._idle.pop(connection, None)
            try:
                # A connected connection with nothing unread is ready; else redis-py's own check (connect, or
                # reconnect one that holds data or whose socket closed).
                try:
                    ready = connection.is_connected and not await connection.can_read()
                except Exception:
                    ready = False
                if not ready:
                    await self.ensure_connection(connection)
            except BaseException:
                await self.release(connection)
                raise
            return connection
        connection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._idle.pop(connection, None)
        return connection

    async def release(self, connection: AbstractConnection) -> None:
        if self._nobody_waits():
            await ConnectionPool.release(self, connection)
            if not self._nobody_waits():  # one came to wait meanwhile: wake it as redis-py would
                async with self._condition:
                    self._condition.notify()
        else:
            await super().release(connection)
        self._idle[connection] = time.monotonic()
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.idle_seconds, self._close_idle)

    def _close_idle(self) -> None:
        self._sweep = None
        self._closing = asyncio.get_running_loop().create_task(self._close_stale())

    async def _close_stale(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        for connection, since in list(self._idle.items()):
            if since <= cutoff and self._idle.get(connection) == since:  # not taken since the list was made
                del self._idle[connection]
                # Without waiting for the close, disconnect does not suspend: no task can take the connection
                # while it closes.
                with contextlib.suppress(Exception):
                    await connection.disconnect(nowait=True)
        if self._idle and self._sweep is None:
            wait = min(self._idle.values()) + self.idle_seconds - time.monotonic()
            self._sweep = asyncio.get_running_loop().call_later(max(wait, 0.0), self._close_idle)

    def open_idle(self) -> int:
        """How many connections are open and idle."""
        return sum(1 for connection in self._idle if connection.is_connected)


def bounded_pool(url: str, **options: Any) -> BoundedConnectionPool:
    """A ``BoundedConnectionPool`` for ``url`` sized by the settings; ``options`` are redis-py connection options."""
    options.pop("max_connections", None)
    pool: BoundedConnectionPool = BoundedConnectionPool.from_url(
        url,
        max_connections=int(mcp_settings.REDIS_MAX_CONNECTIONS),
        timeout=float(mcp_settings.REDIS_POOL_WAIT_SECONDS),
        idle_seconds=float(mcp_settings.REDIS_IDLE_SECONDS),
        **options,
    )
    return pool


SOCKET_TIMEOUT_SECONDS = 2.0  # a command of shared state (not a blocking read) that takes longer has failed

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, float], redis.Redis]] = (
    weakref.WeakKeyDictionary()
)


# The clients of the loop that asked last: found again without a weak reference made per command.
_recent: tuple[weakref.ref[asyncio.AbstractEventLoop], dict[tuple[str, float], redis.Redis]] | None = None


def redis_client(url: str, *, socket_timeout: float = SOCKET_TIMEOUT_SECONDS) -> redis.Redis:
    """The running loop's client for ``url`` (see the module docstring); redis-py connections belong to the loop
    that made them, so a client is never shared across loops."""
    global _recent
    loop = asyncio.get_running_loop()
    recent = _recent
    if recent is not None and recent[0]() is loop:
        clients = recent[1]
    else:
        clients = _clients.setdefault(loop, {})
        _recent = (weakref.ref(loop), clients)
    client = clients.get((url, socket_timeout))
    if client is None:
        pool = bounded_pool(url, **redis_connection_options(socket_timeout=socket_timeout))
        client = clients[(url, socket_timeout)] = redis.Redis(connection_pool=pool)
    return client


_sync_clients: dict[tuple[str, float], Any] = {}
_sync_lock = threading.Lock()


def sync_redis_client(url: str, *, socket_timeout: float = SOCKET_TIMEOUT_SECONDS) -> Any:
    """The process's blocking client for ``url`` and ``socket_timeout`` (redis-py's pool opens new connections
    in a forked child by itself)."""
    with _sync_lock:
        client = _sync_clients.get((url, socket_timeout))
        if client is None:
            import redis as blocking

            options = redis_connection_options(socket_timeout=socket_timeout, blocking=True)
            client = _sync_clients[(url, socket_timeout)] = blocking.Redis.from_url(url, **options)
        return client


_scripts: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def script(client: Any, source: str) -> Any:
    """``source`` registered on ``client`` (a ``Script`` or ``AsyncScript``, by the client's kind), once per client."""
    registered = _scripts.setdefault(client, {})
    found = registered.get(source)
    if found is None:
        found = registered[source] = client.register_script(source)
    return found


# A turn's batch of one pool: each call's commands, and where its results go.
_Batch = list[tuple[tuple[tuple[Any, ...], ...], "asyncio.Future[list[Any]]"]]
_batches: dict[Any, _Batch] = {}  # by pool: the calls not sent yet
_sending: set[asyncio.Task[None]] = set()  # the batches under way (a task the loop only weakly holds can vanish)


async def pipelined(client: redis.Redis, *commands: tuple[Any, ...]) -> list[Any]:
    """The results of ``commands`` (each ``(name, *arguments)``), sent in one pipeline (``transaction=False``)
    with the commands of every other call made on ``client``'s pool in this turn of the loop, in the order of the
    calls. It returns once Redis has answered; it raises its own first command error (other calls' errors are
    theirs), or the connection's error, which every call of the batch raises."""
    pool = client.connection_pool
    batch = _batches.get(pool)
    if batch is None:
        batch = _batches[pool] = []
        # Its first step runs after the callbacks of this turn, so every call they make joins the batch.
        sending = asyncio.get_running_loop().create_task(_send(client, batch))
        _sending.add(sending)
        sending.add_done_callback(_sending.discard)
    answer: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
    batch.append((commands, answer))
    results = await answer
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


async def _send(client: redis.Redis, batch: _Batch) -> None:
    del _batches[client.connection_pool]  # calls made from now on go in the next batch
    try:
        pipe = client.pipeline(transaction=False)
        for commands, _answer in batch:
            for command in commands:
                pipe.execute_command(*command)
        results = await pipe.execute(raise_on_error=False)
    except BaseException as error:
        for _commands, answer in batch:
            if not answer.done():
                answer.set_exception(error)
        if not isinstance(error, Exception):
            raise
        return
    start = 0
    for commands, answer in batch:
        if not answer.done():
            answer.set_result(results[start : start + len(commands)])
        start += len(commands)
