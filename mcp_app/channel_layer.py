"""Living with the channel layer: connection options for Redis, receive loops that survive it, its health, and
the one messaging primitive every cross-process conversation of the app is written with (docs/architecture.md,
"One messaging primitive"; docs/robustness.md, "Redis as channel layer").

- ``redis_layer_config(url, prefix)``: the ``CHANNEL_LAYERS["default"]`` a project should use with channels-redis.
- ``receive_forever(layer, channel)``: every ``receive()`` loop of the app; layer errors are logged once per outage
  and retried with bounded backoff, never raised; it ends as soon as its task is cancelled (``_receive``).
- ``layer_health`` and ``LAYER_ERRORS``: whether the layer answered its last operation (the edge refuses work that
  needs it with a fast 503), and the exceptions that mean it is unreachable.
- ``messaging(layer)``: a ``Messaging``, the channel layer or the in-process bus (``local_bus``), alike.
  ``subscribe(*groups)`` gives a ``Subscription`` (its own ``address``, ``join``, ``leave``, an ``on_message``
  callback or a bounded ``receive``, ``close``); every listener of the app is one.
- ``Correlator``: request/reply by correlation key, with the one timeout answer (``timeout_answer``, -32001).

Not owned here: group names and event types (``events.py``), what a message means (the consumer, the tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .backends import Health
from .protocol.errors import RequestTimeout

logger = logging.getLogger("mcp_app.channel_layer")

# channels-redis blocks in BZPOPMIN for this long (RedisChannelLayer.brpop_timeout); the socket must wait longer,
# else redis-py's TimeoutError escapes receive() and a message popped in that instant is lost.
BLOCKING_RECEIVE_SECONDS = 5
SOCKET_TIMEOUT_SECONDS = BLOCKING_RECEIVE_SECONDS + 10
BACKOFF_FIRST_SECONDS = 0.05
BACKOFF_MAX_SECONDS = 2.0


def _layer_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError, OSError]
    try:
        import redis.exceptions

        errors += [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError]
    except ImportError:  # the embedded default runs without redis-py
        pass
    return tuple(errors)


LAYER_ERRORS: tuple[type[BaseException], ...] = _layer_errors()


def redis_layer_config(url: str, *, prefix: str = "asgi", **config: Any) -> dict[str, Any]:
    """``CHANNEL_LAYERS["default"]`` for channels-redis at ``url`` with connection options that suit it, and its
    writes batched (``mcp_app.redis_layer.RedisChannelLayer``)."""
    from .redis_pool import redis_connection_options

    host = {"address": url, **redis_connection_options(socket_timeout=SOCKET_TIMEOUT_SECONDS)}
    return {"BACKEND": "mcp_app.redis_layer.RedisChannelLayer", "CONFIG": {"hosts": [host], "prefix": prefix, **config}}


layer_health = Health("CHANNEL_LAYER", "what needs it (streams, worker calls, cancellations) is refused meanwhile")


async def guarded(operation: Awaitable[Any]) -> Any:
    """Await a layer operation, recording in ``layer_health`` whether the layer answered (errors re-raised)."""
    try:
        result = await operation
    except LAYER_ERRORS as error:
        layer_health.failed(error)
        raise
    layer_health.succeeded()
    return result


# What a receive loop awaits on each failed receive (e.g. to tell a client its stream broke).
OnError = Callable[[BaseException], Awaitable[None]]
# How often a cancelled receive that carried on is asked again to stop (see ``_receive``).
RECANCEL_SECONDS = 0.01


async def _receive(layer: Any, channel: str) -> dict[str, Any]:
    """One ``layer.receive(channel)`` that ends when the calling task is cancelled, even when the layer swallows
    the cancellation (on Python 3.11 ``asyncio.wait_for``, which redis-py wraps every command in, returns the inner
    result instead of raising when both land in the same loop turn): the receive runs as a child task, cancelled
    again until it has ended, and a message it returns after the cancellation is dropped, as channels-redis drops
    a cancelled receiver's buffer."""
    receiving: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(layer.receive(channel))
    try:
        await asyncio.wait((receiving,))
    except asyncio.CancelledError:
        await _stop(receiving)
        raise
    return receiving.result()


async def _stop(receiving: asyncio.Future[dict[str, Any]]) -> None:
    """Cancel ``receiving`` until it has ended, however often the calling task is cancelled meanwhile (it is
    cancelled already: it raises once the receive has ended). A receive left behind blocks on its channel for
    good, and a closing event loop, which cancels each of its tasks once and waits for all of them, with it."""
    while not receiving.done():
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((receiving,), timeout=RECANCEL_SECONDS)
    if not receiving.cancelled():
        receiving.exception()  # retrieved: the receive ended by itself in the same turn, nobody wants it


async def receive_forever(
    layer: Any, channel: str, *, on_error: OnError | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The messages of ``channel``, surviving timeouts and reconnects (logged once per outage, bounded backoff).

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


# The messaging primitive (module docstring) --------------------------------------------------------------

Message = dict[str, Any]
# ``on_message`` returns True to end the subscription's receiving (e.g. a cancellation heard once).
OnMessage = Callable[[Message], bool | None]
STOP = "mcp.stop"  # ends a receive loop on its own channel (see ``Subscription.close``)
STOP_WAIT_SECONDS = 2.0


class Subscription:
    """A channel of one's own, a member of ``groups``: messages go to ``on_message`` (called on the loop that
    subscribed), else into a queue read by ``receive(timeout)``. ``address`` is where ``send`` reaches it."""

    address: str

    def __init__(self, on_message: OnMessage | None) -> None:
        self._on_message = on_message
        # Only a subscription read with ``receive`` has a queue: an idle GET stream's (a callback) holds none.
        self._queue: asyncio.Queue[Message] | None = asyncio.Queue() if on_message is None else None
        self.groups: list[str] = []
        self.ended = asyncio.Event()

    def _deliver(self, message: Message) -> bool:
        """Hand one message over; whether receiving ends with it."""
        if self.ended.is_set():
            return True
        if message.get("type") == STOP:
            self.ended.set()
            return True
        if self._on_message is None:
            assert self._queue is not None
            self._queue.put_nowait(message)
            return False
        if self._on_message(message):
            self.ended.set()
            return True
        return False

    async def receive(self, within: float | None = None) -> Message | None:
        """The next message (without ``on_message``), or ``None`` after ``within`` seconds."""
        if self._queue is None:
            raise TypeError("a subscription with on_message is not read with receive()")
        try:
            return await asyncio.wait_for(self._queue.get(), within)
        except TimeoutError:
            return None

    def adopt(self, group: str) -> None:
        """The channel was made a member of ``group`` by someone else (no round trip): leave it on ``close``."""
        if group not in self.groups:
            self.groups.append(group)

    async def join(self, group: str) -> None:
        raise NotImplementedError

    async def leave(self, group: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def start(self, receive_after: float) -> None:
        """Start receiving (on the in-process bus, messages are handed over as they are sent: nothing to start)."""


class Messaging:
    """Where subscriptions live and messages travel: the channel layer (``LayerMessaging``) or the in-process bus
    (``LocalBus``)."""

    async def subscribe(
        self,
        *groups: str,
        channel: str | None = None,
        on_message: OnMessage | None = None,
        on_error: OnError | None = None,
        receive_after: float = 0.0,
        stop_by_message: bool = False,
    ) -> Subscription:
        """A new channel (or ``channel``, one already enrolled in groups), a member of ``groups``; receiving
        starts ``receive_after`` seconds from now (what is sent meanwhile waits in the channel). ``close``
        ends the receive loop with a ``STOP`` message to itself when ``stop_by_message`` (a blocked receive of
        channels-redis is not reliably cancellable), else by cancelling it. Layer errors are raised."""
        subscription = await self._open(channel, on_message, on_error, stop_by_message)
        try:
            for group in groups:
                await subscription.join(group)
        except BaseException:
            await subscription.close()
            raise
        subscription.start(receive_after)
        return subscription

    async def _open(
        self, channel: str | None, on_message: OnMessage | None, on_error: OnError | None, stop_by_message: bool
    ) -> Subscription:
        raise NotImplementedError

    async def send(self, address: str, message: Message) -> None:
        raise NotImplementedError

    async def group_send(self, group: str, message: Message) -> None:
        raise NotImplementedError


class LocalBus(Messaging):
    """The in-process implementation: groups of subscriptions of this process, the same message shapes as on
    the channel layer. ``group_send`` may be called from any thread (the admin's cancel runs in one)."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[_LocalSubscription, asyncio.AbstractEventLoop]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    async def _open(
        self, channel: str | None, on_message: OnMessage | None, on_error: OnError | None, stop_by_message: bool
    ) -> Subscription:
        subscription = _LocalSubscription(self, channel or f"{LOCAL_PREFIX}{next(self._ids)}", on_message)
        self._add(subscription.address, subscription)
        return subscription

    async def send(self, address: str, message: Message) -> None:
        self.deliver(address, message)

    async def group_send(self, group: str, message: Message) -> None:
        self.deliver(group, message)

    def deliver(self, group: str, message: Message) -> None:
        """``group_send`` from synchronous code, on any thread."""
        with self._lock:
            members = list(self.groups.get(group, {}).items())
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for subscription, loop in members:
            if loop is running:
                subscription.take(message)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(subscription.take, message)

    def _add(self, group: str, subscription: _LocalSubscription) -> None:
        with self._lock:
            self.groups.setdefault(group, {})[subscription] = asyncio.get_running_loop()

    def _discard(self, group: str, subscription: _LocalSubscription) -> None:
        with self._lock:
            members = self.groups.get(group)
            if members is not None:
                members.pop(subscription, None)
                if not members:
                    self.groups.pop(group, None)


LOCAL_PREFIX = "local."  # the addresses of subscriptions on the in-process bus


class _LocalSubscription(Subscription):
    def __init__(self, bus: LocalBus, address: str, on_message: OnMessage | None) -> None:
        super().__init__(on_message)
        self._bus = bus
        self.address = address

    def take(self, message: Message) -> None:
        if self._deliver(message):
            self._leave_all()

    async def join(self, group: str) -> None:
        if not self.ended.is_set():
            self._bus._add(group, self)
            self.adopt(group)

    async def leave(self, group: str) -> None:
        if group in self.groups:
            self.groups.remove(group)
        self._bus._discard(group, self)

    def _leave_all(self) -> None:
        for group in [*self.groups, self.address]:
            self._bus._discard(group, self)
        self.groups.clear()

    async def close(self) -> None:
        self.ended.set()
        self._leave_all()


local_bus = LocalBus()


class LayerMessaging(Messaging):
    """The channel-layer implementation of ``Messaging``."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer

    async def _open(
        self, channel: str | None, on_message: OnMessage | None, on_error: OnError | None, stop_by_message: bool
    ) -> Subscription:
        address = channel if channel is not None else await self.layer.new_channel()
        return _LayerSubscription(self.layer, address, on_message, on_error, stop_by_message)

    async def send(self, address: str, message: Message) -> None:
        await self.layer.send(address, message)

    async def group_send(self, group: str, message: Message) -> None:
        await self.layer.group_send(group, message)


class _LayerSubscription(Subscription):
    def __init__(
        self, layer: Any, address: str, on_message: OnMessage | None, on_error: OnError | None, stop_by_message: bool
    ) -> None:
        super().__init__(on_message)
        self._layer = layer
        self.address = address
        self._on_error = on_error
        self._stop_by_message = stop_by_message
        self.receiving = False
        self._pump: asyncio.Task[None] | None = None

    def start(self, receive_after: float) -> None:
        # A context of its own: the loop outlives the request that happens to start it (and its log context).
        loop = asyncio.get_running_loop()
        self._pump = loop.create_task(self._run(receive_after), context=contextvars.Context())

    async def _run(self, receive_after: float) -> None:
        if receive_after:
            await asyncio.sleep(receive_after)
        self.receiving = True
        try:
            async for message in receive_forever(self._layer, self.address, on_error=self._on_error):
                if self._deliver(message):
                    return
        finally:
            self.ended.set()

    async def join(self, group: str) -> None:
        await self._layer.group_add(group, self.address)
        self.adopt(group)

    async def leave(self, group: str) -> None:
        if group in self.groups:
            self.groups.remove(group)
        await self._layer.group_discard(group, self.address)

    async def close(self) -> None:
        """End the receive loop (bounded) and leave every group; failures to leave are logged, never raised
        (membership expires with the layer's ``group_expiry``)."""
        pump = self._pump
        if pump is not None and not pump.done():
            if self._stop_by_message and self.receiving:
                with contextlib.suppress(*LAYER_ERRORS):
                    await self._layer.send(self.address, {"type": STOP})
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(pump), STOP_WAIT_SECONDS)
            if not pump.done():
                pump.cancel()
                await asyncio.wait({pump})  # unlike awaiting it, never swallows this task's own cancellation
        if pump is not None and pump.done() and not pump.cancelled() and pump.exception() is not None:
            logger.error("a receive loop failed", exc_info=pump.exception())
        self.ended.set()
        for group in self.groups:
            try:
                await self._layer.group_discard(group, self.address)
            except LAYER_ERRORS as error:
                logger.info("could not leave group %s: %s", group, type(error).__name__)
            except Exception:
                logger.warning("could not leave group %s", group, exc_info=True)
        self.groups.clear()


_loop_layers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def use_layer_in_loop(loop: asyncio.AbstractEventLoop, layer: Any) -> None:
    """Make ``layer`` the default layer of ``messaging()`` in ``loop`` (a Celery worker thread's loop: channels-redis
    receives on one loop per layer, so each such loop has a layer of its own)."""
    _loop_layers[loop] = layer


def messaging(layer: Any = ..., *, address: str = "") -> Messaging:
    """The channel layer ``layer`` (default: the running loop's, ``use_layer_in_loop``, else the process's) as
    ``Messaging``; the in-process bus without one, or for an ``address`` on it."""
    if address.startswith(LOCAL_PREFIX):
        return local_bus
    if layer is ...:
        from channels.layers import get_channel_layer

        try:
            layer = _loop_layers.get(asyncio.get_running_loop(), ...)
        except RuntimeError:
            layer = ...
        if layer is ...:
            layer = get_channel_layer()
    return local_bus if layer is None else LayerMessaging(layer)


def timeout_answer(method: str) -> Message:
    """The one answer that stands in for a client's that did not come in time (-32001)."""
    return {"error": RequestTimeout(f"The client did not answer {method} in time").to_wire()}


class Correlator:
    """Request/reply: answers awaited by correlation key, with one timeout answer (``timeout_answer``)."""

    def __init__(self) -> None:
        self._pending: dict[Any, asyncio.Future[Message]] = {}

    async def ask(self, key: Any, send: Callable[[], Awaitable[Any]], *, method: str, within: float | None) -> Message:
        """``send`` the request (after the wait for its answer is in place), then its answer, or the timeout
        answer after ``within`` seconds."""
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            await send()
            return await asyncio.wait_for(future, within)
        except TimeoutError:
            return timeout_answer(method)
        finally:
            self._pending.pop(key, None)

    def resolve(self, key: Any, answer: Message) -> bool:
        """The answer of ``key`` arrived; whether somebody awaited it."""
        future = self._pending.get(key)
        if future is None or future.done():
            return False
        future.set_result(answer)
        return True
