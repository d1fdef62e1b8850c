"""One consumer's place on the channel layer: its channel, the groups it joined, and the pump that feeds it.

``Membership`` takes a channel at the first ``join`` only, and feeds the consumer's inbox (``mcp.layer_down`` once
per outage). ``InboxConsumer`` is that inbox and a message loop without Channels' ``await_many_dispatch`` (a task
per source and per message); ``cleanup`` runs when it ends, unless the work was ``detached``.

Where the work runs: a request that cannot outlive its client (no session, not a GET stream: the common warm
call) is served in the application's own task, with no other task, future or inbox; its message loop (the
``http.disconnect`` watch and the inbox) starts beside it only when something needs it: after
``WATCH_DELAY_SECONDS``, or at the first event for the inbox (a cancellation, a client's reply, a broadcast).
The loop stops such work by cancelling the application's task (``stop_work``). A request whose work may outlive
its client (a handshake-era session's resumable stream) or that streams from its start (GET) runs its work in a
task of its own, and the loop at once in the application's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import deque
from collections.abc import Coroutine
from typing import Any, Protocol

from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer

from ..channel_layer import LayerMessaging, Subscription
from ..events import BROADCAST_EVENT, CANCEL_EVENT, REPLY_EVENT, STREAM_EVENT

logger = logging.getLogger("mcp_app.transport")

LAYER_DOWN_EVENT = "mcp.layer_down"
# How long work served in the application's task runs before its message loop (the disconnect watch) starts.
WATCH_DELAY_SECONDS = 0.05
_FORWARDED = (BROADCAST_EVENT, REPLY_EVENT, CANCEL_EVENT, STREAM_EVENT)


class Inbox(Protocol):
    """Where the pump puts what it receives: the consumer's message loop (never blocks, never fails)."""

    def put_nowait(self, message: dict[str, Any]) -> None: ...


class Membership:
    """The channel-layer groups of one consumer, feeding ``inbox``."""

    def __init__(self, inbox: Inbox) -> None:
        # Weakly: the consumer holds its membership, and a cycle would leave every request's objects to the
        # garbage collector. A consumer lives while its request is served (or its detached call runs).
        self._inbox = weakref.ref(inbox)
        self._subscription: Subscription | None = None

    @property
    def groups(self) -> list[str]:
        return self._subscription.groups if self._subscription is not None else []

    async def join(self, group: str) -> None:
        """Join ``group`` (again: refreshes membership on layers that expire groups). No layer: nothing."""
        if self._subscription is None:
            layer = get_channel_layer()
            if layer is None:
                return

            async def lost(_error: BaseException) -> None:
                self._put({"type": LAYER_DOWN_EVENT})

            self._subscription = await LayerMessaging(layer).subscribe(on_message=self._forward, on_error=lost)
        await self._subscription.join(group)

    def _forward(self, message: dict[str, Any]) -> None:
        if message.get("type") in _FORWARDED:
            self._put(message)

    def _put(self, message: dict[str, Any]) -> None:
        inbox = self._inbox()
        if inbox is not None:
            inbox.put_nowait(message)

    async def leave(self, group: str) -> None:
        if self._subscription is not None and group in self._subscription.groups:
            await self._subscription.leave(group)

    async def close(self) -> None:
        """Stop the pump and leave every group."""
        if self._subscription is not None:
            await self._subscription.close()


class InboxConsumer(AsyncConsumer):
    """A consumer of one HTTP request: where its work runs, its message loop and its inbox (see the module
    docstring). A subclass reads the body in its ``http_request`` and hands the work to ``begin``."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.base_send = send
        self.channel_layer = None
        self.channel_name = None
        self.membership = Membership(self)
        self.work: asyncio.Task[None] | None = None  # the work's own task (``begin(own_task=True)``)
        self.detached = False
        self._begun: tuple[Coroutine[Any, Any, None], bool] | None = None
        self._receive = receive
        self._inbox: deque[dict[str, Any]] | None = None  # channel-layer and internal events, dispatched in order
        self._waiter: asyncio.Future[None] | None = None
        self._here: asyncio.Task[None] | None = None  # the application's task, while it runs the work itself
        self._watcher: asyncio.Task[None] | None = None  # the message loop beside work that runs here
        self._stopping: asyncio.Future[None] | None = None  # set once work stopped here has ended
        try:
            await self._run()
        except StopConsumer:
            pass
        finally:
            if not self.detached:
                await self.cleanup()

    def begin(self, work: Coroutine[Any, Any, None], *, own_task: bool) -> None:
        """The body is complete: serve it with ``work``. ``own_task`` when the work may outlive this consumer (a
        resumable stream goes on when its client leaves) or streams from its start: it gets a task of its own and
        the message loop runs at once. Otherwise the application's task runs it, and the loop only once something
        needs it (``WATCH_DELAY_SECONDS`` later, or at the inbox's first event)."""
        self._begun = (work, own_task)

    @property
    def begun(self) -> bool:
        """``begin`` was called: the body is complete."""
        return self._begun is not None

    async def cleanup(self) -> None:
        watcher = self._watcher
        if watcher is not None and not watcher.done():  # the work ended by an error of its own: so does its loop
            watcher.cancel()
        await self.membership.close()

    async def _run(self) -> None:
        while self._begun is None:
            await self.dispatch(await self._receive())  # http.request (the body), or http.disconnect: StopConsumer
        work, own_task = self._begun
        if own_task:
            self.work = asyncio.create_task(work)
            self.work.add_done_callback(self._wake)
            await self._loop()
        else:
            await self._serve_here(work)

    async def _serve_here(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in this task; the message loop starts beside it only when needed (``_watch``)."""
        here = self._here = asyncio.current_task()
        assert here is not None
        timer = asyncio.get_running_loop().call_later(WATCH_DELAY_SECONDS, self._watch)
        try:
            await work
        except asyncio.CancelledError:
            if self._stopping is None:  # not ``stop_work``'s: daphne's (or the loop's owner's) cancellation
                raise
        finally:
            timer.cancel()
            self._here = None
            if self._stopping is not None and not self._stopping.done():
                self._stopping.set_result(None)
            self._wake()
        if self._stopping is not None and here.uncancel() > 0:
            raise asyncio.CancelledError  # cancelled from outside as well as by ``stop_work``
        if self._watcher is not None:
            await self._watcher  # it ends once its inbox is empty; StopConsumer when the client left

    def _watch(self) -> None:
        """Start the message loop beside the work that runs here (the disconnect watch, the inbox)."""
        if self._watcher is None and self._here is not None:
            self._watcher = asyncio.ensure_future(self._watching())

    async def _watching(self) -> None:
        try:
            await self._loop()
        except BaseException:
            self._stop_here()  # the loop ended first (the client left, the layer is lost): the work ends too
            raise

    async def _loop(self) -> None:
        """Dispatch the client's messages (``http.disconnect``) and the inbox's, in order, until the work is done."""
        pending = asyncio.ensure_future(self._receive())
        pending.add_done_callback(self._wake)
        try:
            while True:
                while self._inbox:
                    await self.dispatch(self._inbox.popleft())
                if pending.done():
                    message = pending.result()
                    pending = asyncio.ensure_future(self._receive())
                    pending.add_done_callback(self._wake)
                    await self.dispatch(message)
                    continue
                if not self._working:
                    return
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
        finally:
            self._waiter = None
            pending.cancel()

    @property
    def _working(self) -> bool:
        return self._here is not None if self.work is None else not self.work.done()

    def _wake(self, _source: object = None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _stop_here(self) -> asyncio.Future[None] | None:
        """Cancel the work running in the application's task; the future is set once it has ended."""
        if self._here is None:
            return None
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_future()
            self._here.cancel()
        return self._stopping

    async def stop_work(self) -> bool:
        """Cancel the work under way and wait for it to end; ``False`` when there was none."""
        if self.work is not None:
            if self.work.done():
                return False
            self.work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.work
            return True
        stopping = self._stop_here()
        if stopping is None:
            return False
        await stopping
        return True

    def put_nowait(self, message: dict[str, Any]) -> None:
        """The inbox (``Inbox``): an event for this consumer's message loop, started for it if need be."""
        if self._inbox is None:
            self._inbox = deque()
        self._inbox.append(message)
        self._wake()
        self._watch()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Unlike AsyncConsumer.dispatch, no connection clean-up per message: all ORM work goes through
        # database_sync_to_async, which already closes stale connections around each call.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
