"""The idle GET streams of one process: one subscription to the channel layer and one keep-alive task for all.

Once a GET stream's head is out (``Streams.serve_get``), all it does until its client leaves is wait: for a
notification to its server's or its session's group (``events.Broadcast``), for its next keep-alive, and for an
invalidation that concerns its access (``transport.watch``). Its consumer, message loop, channel, pump task and
timers are not kept for that. ``FanOut`` (one per event loop and channel layer, ``fan_out()``) holds an
``IdleStream`` per stream (its ``StreamTail``, session, grant, re-check and stream slots) and:

- one ``Subscription`` to the layer, a member of the union of its streams' groups: a ``Broadcast`` goes to the
  streams of the group it names (its ``group``), in order per stream (a task runs only while a stream has
  something to write);
- one keep-alive task: every stream is due one interval after it started, then one interval after its last
  keep-alive, so the streams in the order they are due are an ordered dict and the task sleeps until the first
  is due. A due stream is re-checked (``auth.Credentials.recheck``), then kept alive; the groups are joined again
  once per interval (layers that expire groups keep them);
- on a failed receive (the layer is gone) every stream ends with an error event and the subscription goes: the
  clients reconnect, and get a 503 until the layer is back.

A fan-out without streams holds no subscription and no task. A stream joins its groups before its head goes out
(events that arrive meanwhile wait in the stream until ``release``), so a client that acts on ``: ready`` hears
what follows.

The ASGI application instance of an idle stream stays alive while its response is open (ASGI asks it), holding
only its ``receive`` and the stream, in ``IdleStream.wait``: at ``http.disconnect`` the stream leaves the fan-out
and gives its slots back. A stream the fan-out ends itself (access refused, the layer lost) has finished its
response, after which a server answers ``receive`` with ``http.disconnect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import weakref
from typing import Any

from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, LayerMessaging, Subscription
from ..conf import mcp_settings
from ..database import DATABASE_ERRORS
from ..events import Broadcast
from ..limits.caps import Slot
from ..protocol.errors import ServiceUnavailable
from ..protocol.messages import list_changed
from . import sse
from .auth import AccessGrant
from .sessions import DatabaseSession
from .watch import Recheck, changed_lists, stream_tags, unwatch, watch
from .writer import Response, StreamTail, send_body

logger = logging.getLogger("mcp_app.transport")

KEEP_ALIVE = sse.comment("keep-alive")

# What a stream's backlog holds besides notifications: a keep-alive is due; an invalidation concerns it; the layer
# is gone.
_DUE, _WOKEN, _LOST = object(), object(), object()
_SCOPE = {"method": "GET", "path": "(idle GET stream)"}  # how ``Response.fail`` names a failed stream in the log


def _task(loop: asyncio.AbstractEventLoop, coroutine: Any) -> asyncio.Task[None]:
    # A context of its own: the task serves many requests, none of whose log context is its.
    return loop.create_task(coroutine, context=contextvars.Context())


class IdleStream:
    """One idle GET stream in a ``FanOut``: what it needs to be written to, re-checked and closed."""

    __slots__ = (
        "__weakref__",
        "_backlog",
        "_drainer",
        "_fanout",
        "_loop",
        "due",
        "ended",
        "grant",
        "groups",
        "recheck",
        "response",
        "session",
        "slots",
        "tags",
        "tail",
    )

    def __init__(
        self,
        response: Response,
        grant: AccessGrant,
        session: DatabaseSession | None,
        recheck: Recheck | None,
        groups: tuple[str, ...],
    ) -> None:
        self.response = response
        self.tail: StreamTail | None = None  # given at ``release``, once the head is out
        self.grant = grant
        self.session = session
        self.recheck = recheck
        self.tags = stream_tags(grant, session) if recheck is not None else ()
        self.groups = groups
        self.slots: list[Slot] = []  # handed over by the consumer; given back at ``close``
        self.due = 0.0  # loop time of its next keep-alive
        self.ended = False
        self._loop = asyncio.get_running_loop()
        self._backlog: list[Any] | None = []  # what waits to be written; ``None``: nothing, and released
        self._drainer: asyncio.Task[None] | None = None
        self._fanout: FanOut | None = None

    # The ASGI application's part ----------------------------------------------------------------------

    async def wait(self, receive: Any) -> None:
        """Wait for the client to leave (the application instance's only work while the stream is open)."""
        try:
            while not self.ended and (await receive())["type"] != "http.disconnect":
                pass
        finally:
            await self.close()

    async def close(self) -> None:
        """Leave the fan-out, stop watching, give the slots back (idempotent)."""
        self.ended = True
        fanout, self._fanout = self._fanout, None
        unwatch(self)
        if fanout is not None:
            await fanout.leave(self)
        while self.slots:  # popped: a second close releases nothing twice
            await self.slots.pop().release()

    # What reaches the stream --------------------------------------------------------------------------

    def wake(self) -> None:
        """An invalidation concerns this stream (``watch.Watcher``; from any thread): re-check it soon."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.push, _WOKEN)

    def push(self, item: Any) -> None:
        """A notification (or one of the markers above) to write, after what is before it."""
        if self.ended:
            return
        if self._backlog is not None:  # held until released, or being written
            self._backlog.append(item)
            return
        self._backlog = [item]
        self._drainer = _task(self._loop, self._drain())

    def release(self, tail: StreamTail) -> None:
        """The head is out (``tail`` writes what follows it): write what arrived meanwhile, and from now on as it
        comes."""
        self.tail = tail
        if self._backlog:
            self._drainer = _task(self._loop, self._drain())
        else:
            self._backlog = None

    async def _drain(self) -> None:
        backlog = self._backlog
        try:
            while backlog and not self.ended:
                try:
                    await self._write(backlog)
                except Exception as error:
                    await self._fail(error)
        finally:
            self._backlog = None
            self._drainer = None

    async def _write(self, backlog: list[Any]) -> None:
        """The first item of ``backlog``; a notification with those that follow it, as one burst."""
        item = backlog.pop(0)
        if item is _LOST:
            await self.response.unavailable(ServiceUnavailable(), None, None, None)
            await self.close()
        elif item is _DUE or item is _WOKEN:
            if not await self._allowed():
                await send_body(self.response.send, b"", more_body=False)
                await self.close()
            elif item is _DUE:
                await send_body(self.response.send, KEEP_ALIVE, more_body=True)
        else:
            burst = [item]
            while backlog and isinstance(backlog[0], dict):
                burst.append(backlog.pop(0))
            await self._notify(burst)

    async def _notify(self, events: list[dict[str, Any]]) -> None:
        kept = [event for event in events if await self._heard_by(event)]
        if kept:
            assert self.tail is not None  # released: the head is out
            await self.tail.write(kept)

    async def _heard_by(self, event: dict[str, Any]) -> bool:
        """Only subscribed sessions hear about updates; subscriptions may have changed on another process."""
        if event.get("method") != "notifications/resources/updated":
            return True
        uri = event.get("params", {}).get("uri")
        return self.session is not None and uri in await self.session.reload_subscriptions()

    async def _allowed(self) -> bool:
        """Check access again; announce the lists the caller's grant now shows differently."""
        if self.recheck is None:
            return True
        try:
            grant = await self.recheck()
        except Exception:
            # Nothing said no (the database is unreachable, say): the stream stays, and is re-checked again at
            # the next keep-alive or invalidation.
            logger.warning("could not re-check an open stream's access; it stays open", exc_info=True)
            return True
        if grant is None:
            return False
        await self._notify([list_changed(kind) for kind in changed_lists(self.grant, grant)])
        self.grant = grant
        return True

    async def _fail(self, error: Exception) -> None:
        """Writing failed: a 503's error event for an unavailable service, else the error logged; the stream ends."""
        await self.response.fail(error, None, None, None, _SCOPE)
        if not isinstance(error, ServiceUnavailable | LAYER_ERRORS | DATABASE_ERRORS):
            with contextlib.suppress(Exception):
                await send_body(self.response.send, b"", more_body=False)
        await self.close()


class FanOut:
    """The idle GET streams of one event loop on one channel layer (see the module docstring)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self._streams: dict[IdleStream, None] = {}  # in the order they are due
        self._members: dict[str, set[IdleStream]] = {}  # group: its streams
        self._subscription: Subscription | None = None
        self._opening = asyncio.Lock()
        self._keeper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._joined_at = 0.0  # loop time at which every group was last joined

    def __len__(self) -> int:
        return len(self._streams)

    async def add(self, stream: IdleStream) -> None:
        """Take ``stream`` (what reaches it is held until its ``release``); a member of its groups on return.
        Layer errors are raised, the stream left out."""
        loop = asyncio.get_running_loop()
        stream._fanout = self
        stream.due = loop.time() + float(mcp_settings.SSE_KEEPALIVE_SECONDS)
        self._streams[stream] = None
        for group in stream.groups:
            self._members.setdefault(group, set()).add(stream)
        watch(stream)
        if self._keeper is None:
            self._keeper = _task(loop, self._keep_alive())
        try:
            subscription = await self._subscribed()
            for group in stream.groups:  # joined again even if joined: a layer that restarted forgot it
                if subscription is not None:
                    await subscription.join(group)
        except BaseException:
            await stream.close()
            raise

    async def leave(self, stream: IdleStream) -> None:
        """``stream`` is gone: leave the groups no other stream is in; the subscription goes with the last one."""
        if stream not in self._streams:
            return
        del self._streams[stream]
        emptied = []
        for group in stream.groups:
            members = self._members.get(group)
            if members is not None:
                members.discard(stream)
                if not members:
                    del self._members[group]
                    emptied.append(group)
        subscription = self._subscription
        if subscription is None:
            return
        if not self._streams:
            self._subscription = None
            await subscription.close()  # leaves every group
            return
        for group in emptied:
            try:
                await subscription.leave(group)
            except LAYER_ERRORS as error:  # membership expires with the layer's group_expiry
                logger.info("could not leave group %s: %s", group, type(error).__name__)

    async def _subscribed(self) -> Subscription | None:
        if self.layer is None:
            return None
        async with self._opening:
            if self._subscription is None:
                self._subscription = await LayerMessaging(self.layer).subscribe(
                    on_message=self._heard, on_error=self._lost
                )
                self._joined_at = asyncio.get_running_loop().time()
            return self._subscription

    def _heard(self, message: dict[str, Any]) -> None:
        broadcast = Broadcast.from_wire(message)
        if broadcast is not None:
            for stream in tuple(self._members.get(broadcast.group, ())):
                stream.push(broadcast.message)

    async def _lost(self, _error: BaseException) -> None:
        """A receive failed: the layer is gone. Every stream ends with an error event (in order after what it
        was writing); the subscription goes (its receive loop is this one: closed by another task)."""
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            closing = _task(asyncio.get_running_loop(), subscription.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        for stream in list(self._streams):
            stream.push(_LOST)

    async def _keep_alive(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._streams:
                delay = next(iter(self._streams)).due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                interval, now = float(mcp_settings.SSE_KEEPALIVE_SECONDS), loop.time()
                while self._streams:
                    stream = next(iter(self._streams))
                    if stream.due > now:
                        break
                    del self._streams[stream]  # to the end: due last, one interval from now
                    self._streams[stream] = None
                    stream.due = now + interval
                    stream.push(_DUE)
                if now - self._joined_at >= interval:
                    self._joined_at = now
                    await self._join_again()
        finally:
            self._keeper = None

    async def _join_again(self) -> None:
        """Refresh every group's membership (layers that expire groups keep the streams)."""
        subscription = self._subscription
        if subscription is None:
            return
        for group in list(self._members):
            try:
                await subscription.join(group)
            except LAYER_ERRORS as error:  # the receive loop hears the outage too, and ends the streams
                logger.info("could not join group %s again: %s", group, type(error).__name__)
                return


_fan_outs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FanOut] = weakref.WeakKeyDictionary()


def fan_out() -> FanOut:
    """The fan-out of the running loop and the current channel layer (``None``: keep-alives only)."""
    layer = get_channel_layer()
    loop = asyncio.get_running_loop()
    found = _fan_outs.get(loop)
    if found is None or found.layer is not layer:
        found = _fan_outs[loop] = FanOut(layer)
    return found
