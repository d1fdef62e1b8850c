"""Living with the channel layer: connection options for Redis, receive loops that survive it, and its health.

Contract:

- ``redis_layer_config(url, prefix)`` is the ``CHANNEL_LAYERS["default"]`` a project should use with
  channels-redis. channels-redis receives with ``BZPOPMIN … timeout=5`` (``brpop_timeout``) while redis-py's
  default socket timeout is also 5 s: the two race, the client gives up reading exactly when the server answers,
  and ``redis.exceptions.TimeoutError`` escapes ``receive()`` (a message popped in that instant is lost). The
  config gives the socket a read timeout well above the blocking timeout, keep-alive probes, a short connect
  timeout (a dead Redis is noticed fast) and health checks of idle pooled connections.
- ``receive_forever(layer, channel)`` yields the messages of ``channel`` for as long as its caller iterates:
  timeouts and connection errors are logged once per outage (not once per try), retried with bounded
  exponential backoff, and never escape. Every ``receive()`` loop of the app goes through it. It ends as soon as
  its task is cancelled, even when the layer swallows the cancellation: on Python 3.11 ``asyncio.wait_for``
  returns the inner result instead of raising when both land in the same loop turn (fixed in 3.12), and redis-py
  sends every command through ``wait_for`` when a socket timeout is set, so a receive cancelled while it sends its
  ``BZPOPMIN`` carried on into the 5 s block (a torn-down ``tasks/result`` listener held its answer that long, seen
  in CI). Each receive therefore runs as a child task that is cancelled again until it has ended; a message it
  returns after the cancellation is dropped, as channels-redis drops a cancelled receiver's buffer.
- ``layer_health`` remembers whether the layer answered its last operation, so the edge can refuse work that
  needs the layer with a fast 503 while Redis is down, and notices by itself (the next successful operation)
  when it is back. ``LAYER_ERRORS`` are the exceptions that mean "the layer is unreachable".

Not owned here: group names and event types (``events.py``), what a message means (the consumer, the tasks).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

logger = logging.getLogger("mcp_app.channel_layer")

# channels-redis blocks in BZPOPMIN for this long (RedisChannelLayer.brpop_timeout); the socket must wait longer.
BLOCKING_RECEIVE_SECONDS = 5
SOCKET_TIMEOUT_SECONDS = BLOCKING_RECEIVE_SECONDS + 10
CONNECT_TIMEOUT_SECONDS = 2.0
MAX_CONNECTIONS = 2000
BACKOFF_FIRST_SECONDS = 0.05
BACKOFF_MAX_SECONDS = 2.0
# redis-py 8's asyncio pool allows 100 connections and raises MaxConnectionsError beyond (it does not wait).
# Every in-flight layer command holds one: 64 concurrent streamed calls on sessions (progress fanned out through
# the layer) already exceed 100 on a loaded machine, and their calls failed with -32603 (measured, bench/).
MAX_CONNECTIONS = 2000


def _layer_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError, OSError]
    try:
        import redis.exceptions

        errors += [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError]
    except ImportError:  # the embedded default runs without redis-py
        pass
    return tuple(errors)


LAYER_ERRORS: tuple[type[BaseException], ...] = _layer_errors()


def redis_connection_options(*, socket_timeout: float = SOCKET_TIMEOUT_SECONDS) -> dict[str, Any]:
    """redis-py connection options for the layer and the event store.

    A short connect timeout and two quick retries: a pooled connection that died with a Redis restart is
    replaced on the next command instead of failing it, and a Redis that is down is reported in milliseconds
    (connection refused) or ``CONNECT_TIMEOUT_SECONDS`` (unreachable), never after seconds of backoff.
    """
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), 2),
        "max_connections": MAX_CONNECTIONS,
    }


def redis_layer_config(url: str, *, prefix: str = "asgi", **config: Any) -> dict[str, Any]:
    """``CHANNEL_LAYERS["default"]`` for channels-redis at ``url`` with connection options that suit it, and its
    writes batched (``mcp_app.redis_layer.RedisChannelLayer``)."""
    host = {"address": url, **redis_connection_options()}
    return {"BACKEND": "mcp_app.redis_layer.RedisChannelLayer", "CONFIG": {"hosts": [host], "prefix": prefix, **config}}


class LayerHealth:
    """Whether the channel layer answered its last operation; shared by everything in the process."""

    def __init__(self) -> None:
        self.down_since: float | None = None

    @property
    def up(self) -> bool:
        return self.down_since is None

    def failed(self, error: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            logger.error("the channel layer is unreachable: %s: %s", type(error).__name__, error)

    def succeeded(self) -> None:
        if self.down_since is not None:
            logger.warning("the channel layer is reachable again after %.1fs", time.monotonic() - self.down_since)
            self.down_since = None


layer_health = LayerHealth()


async def guarded(operation: Awaitable[Any]) -> Any:
    """Await a layer operation, recording in ``layer_health`` whether the layer answered (errors re-raised)."""
    try:
        result = await operation
    except LAYER_ERRORS as error:
        layer_health.failed(error)
        raise
    layer_health.succeeded()
    return result


# How often a cancelled receive that carried on is asked again to stop (see the module docstring).
RECANCEL_SECONDS = 0.01


async def _receive(layer: Any, channel: str) -> dict[str, Any]:
    """One ``layer.receive(channel)`` that ends when the calling task is cancelled (see the module docstring)."""
    receiving = asyncio.ensure_future(layer.receive(channel))
    try:
        await asyncio.wait((receiving,))
    except asyncio.CancelledError:
        while not receiving.done():
            receiving.cancel()
            await asyncio.wait((receiving,), timeout=RECANCEL_SECONDS)
        if not receiving.cancelled():
            receiving.exception()  # retrieved: the receive ended by itself in the same turn, nobody wants it
        raise
    return receiving.result()


async def receive_forever(
    layer: Any, channel: str, *, on_error: Callable[[BaseException], Awaitable[None]] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The messages of ``channel``, surviving timeouts and reconnects (see the module docstring).

    ``on_error`` is awaited on each failed receive (before the backoff), e.g. to tell a client its stream broke.
    """
    delay = BACKOFF_FIRST_SECONDS
    failing = False
    while True:
        try:
            message = await _receive(layer, channel)
        except LAYER_ERRORS as error:
            layer_health.failed(error)
            if not failing:
                logger.warning("receive on %s failed (%s); retrying", channel, type(error).__name__)
                failing = True
            if on_error is not None:
                await on_error(error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_SECONDS)
            continue
        if failing:
            logger.info("receive on %s works again", channel)
            failing = False
        layer_health.succeeded()
        delay = BACKOFF_FIRST_SECONDS
        yield message
