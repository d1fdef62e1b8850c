"""One consumer's place on the channel layer: its channel, the groups it joined, and the pump that feeds it.

``Membership`` takes a channel at the first ``join`` only, and feeds the consumer's inbox (``mcp.layer_down`` once
per outage). ``InboxConsumer`` is that inbox and a message loop without Channels' ``await_many_dispatch`` (a task
per source and per message); ``cleanup`` runs when it ends, unless the work was ``detached``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from typing import Any, Protocol

from channels.consumer import AsyncConsumer, get_handler_name
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer

from ..channel_layer import LayerMessaging, Subscription
from ..events import BROADCAST_EVENT, CANCEL_EVENT, REPLY_EVENT, STREAM_EVENT

logger = logging.getLogger("mcp_app.transport")

LAYER_DOWN_EVENT = "mcp.layer_down"
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
    """A consumer of one HTTP request: its message loop and inbox (see the module docstring)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.base_send = send
        self.channel_layer = None
        self.channel_name = None
        self._inbox: deque[dict[str, Any]] = deque()  # channel-layer and internal events, dispatched in order
        self._waiter: asyncio.Future[None] | None = None
        self.membership = Membership(self)
        self.work: asyncio.Task[None] | None = None
        self.detached = False
        try:
            await self._run(receive)
        except StopConsumer:
            pass
        finally:
            if not self.detached:
                await self.cleanup()

    async def cleanup(self) -> None:
        await self.membership.close()

    async def _run(self, receive: Any) -> None:
        while self.work is None:
            await self.dispatch(await receive())  # http.request (the body), or http.disconnect: StopConsumer
        work = self.work
        work.add_done_callback(self._wake)
        pending = asyncio.ensure_future(receive())
        pending.add_done_callback(self._wake)
        try:
            while True:
                while self._inbox:
                    await self.dispatch(self._inbox.popleft())
                if pending.done():
                    message = pending.result()
                    pending = asyncio.ensure_future(receive())
                    pending.add_done_callback(self._wake)
                    await self.dispatch(message)
                    continue
                if work.done():
                    return
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
        finally:
            self._waiter = None
            pending.cancel()

    def _wake(self, _source: object = None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def put_nowait(self, message: dict[str, Any]) -> None:
        """The inbox (``Inbox``): an event for this consumer's message loop."""
        self._inbox.append(message)
        self._wake()

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Unlike AsyncConsumer.dispatch, no connection clean-up per message: all ORM work goes through
        # database_sync_to_async, which already closes stale connections around each call.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
