"""How an event loop of the serving process hears the events of the worker calls it awaits: one subscription
per event loop and ``Messaging`` (``Inbox``), whose receive loop hands each typed event to the waits of the call
it names. ``listen(group, bus)`` joins a call's event group and gives the wait its queue and a ``leave``;
``close_inbox`` ends the loop's subscriptions. A call's events reach its client as the request's own:
``progressed`` (encoded with the request's progress token), ``pass_on`` (notifications, with the request's log
threshold) and ``answer`` (a server-to-client request asked, its ``Answer`` sent back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Any

from ...channel_layer import LAYER_ERRORS, LayerMessaging, Messaging, Subscription, local_bus, messaging
from ...protocol.context import CallContext
from ...protocol.errors import InternalError
from ..message import Answer, Ask, Progress, WorkerEvent, event_from_wire

logger = logging.getLogger("mcp_app.workers")

# Inboxes being closed (their layer was replaced), referenced until done.
_closing: set[asyncio.Task[Any]] = set()


async def listen(group: str, bus: Messaging) -> tuple[asyncio.Queue[WorkerEvent], Any]:
    """Join ``group``; its events arrive on the queue until ``leave()``, through this event loop's ``Inbox`` on
    ``bus`` (the in-process bus when the call runs in this process, else the channel layer)."""
    inbox = _inbox(bus)
    queue = await inbox.join(group)

    async def leave() -> None:
        await inbox.leave(group, queue)

    return queue, leave


class Inbox:
    """An event loop's one subscription to worker events (see the module docstring). A call's wait joins the
    call's event group (``events.worker_group``) with it, so a call costs a join and a leave (one round trip
    each), not a receive loop of its own. An event that names no group (a worker of an older version) reaches
    nobody: its waits read the record on their back-off instead."""

    def __init__(self, bus: Messaging) -> None:
        self.bus = bus
        self.subscription: Subscription | None = None
        self.waits: dict[str, set[asyncio.Queue[WorkerEvent]]] = {}
        self._starting = asyncio.Lock()

    async def _subscription(self) -> Subscription:
        if self.subscription is not None and not self.subscription.ended.is_set():
            return self.subscription
        async with self._starting:  # many first joins at once: one subscription
            if self.subscription is not None and not self.subscription.ended.is_set():
                return self.subscription
            subscription = await self.bus.subscribe(on_message=self._hand, stop_by_message=True)
            if self.subscription is not None:
                logger.error("the receive loop of worker events ended; starting another")
                for group in self.waits:
                    await subscription.join(group)
            self.subscription = subscription
            return subscription

    async def join(self, group: str) -> asyncio.Queue[WorkerEvent]:
        subscription = await self._subscription()
        queue: asyncio.Queue[WorkerEvent] = asyncio.Queue()
        self.waits.setdefault(group, set()).add(queue)  # before joining: nothing sent after the join is missed
        try:
            await subscription.join(group)
        except BaseException:
            self._forget(group, queue)
            raise
        return queue

    async def leave(self, group: str, queue: asyncio.Queue[WorkerEvent]) -> None:
        subscription = self.subscription
        if not self._forget(group, queue) or subscription is None:
            return  # another wait of this process still follows the call
        with contextlib.suppress(*LAYER_ERRORS):
            await subscription.leave(group)
            if group in self.waits:  # joined again while leaving: stay a member
                await subscription.join(group)

    def _forget(self, group: str, queue: asyncio.Queue[WorkerEvent]) -> bool:
        """Drop one wait; whether it was the group's last here."""
        waits = self.waits.get(group)
        if waits is None:
            return False
        waits.discard(queue)
        if waits:
            return False
        del self.waits[group]
        return True

    def _hand(self, message: dict[str, Any]) -> None:
        received = event_from_wire(message)
        if received is not None:
            group, event = received
            for queue in self.waits.get(group, ()):
                queue.put_nowait(event)

    async def close(self) -> None:
        if self.subscription is not None:
            await self.subscription.close()
        self.subscription = None


# Each event loop's inboxes (daphne has one loop; tests make one per test): on the channel layer, and on the
# in-process bus.
_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Inbox] = weakref.WeakKeyDictionary()
_local_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Inbox] = weakref.WeakKeyDictionary()


def _inbox(bus: Messaging) -> Inbox:
    loop = asyncio.get_running_loop()
    inboxes = _local_inboxes if bus is local_bus else _inboxes
    inbox = inboxes.get(loop)
    if inbox is None or _layer(inbox.bus) is not _layer(bus):
        if inbox is not None:  # the layer was replaced (settings changed): its receive loop ends
            _closing.add(asyncio.ensure_future(inbox.close()))
        inbox = inboxes[loop] = Inbox(bus)
    return inbox


def _layer(bus: Messaging) -> Any:
    return bus.layer if isinstance(bus, LayerMessaging) else None


async def close_inbox() -> None:
    """End this event loop's receive loops of worker events (before the loop closes: tests, a shutdown)."""
    loop = asyncio.get_running_loop()
    for inboxes in (_inboxes, _local_inboxes):
        inbox = inboxes.pop(loop, None)
        if inbox is not None:
            await inbox.close()


async def progressed(report: Progress, call: CallContext) -> None:
    """A worker's progress report, sent as this request's ``notifications/progress`` (its token)."""
    await call.progress.report(report.progress, report.total, report.message)


async def pass_on(message: dict[str, Any], call: CallContext) -> None:
    """A worker's notification, sent as this request's own (its log threshold; a progress notification from an
    older worker, with this request's progress token)."""
    raw = message.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    method = message.get("method")
    if method == "notifications/progress":
        progress = params.get("progress")
        if isinstance(progress, int | float):
            await call.progress.report(progress, params.get("total"), params.get("message"))
    elif method == "notifications/message":
        level = params.get("level")
        if isinstance(level, str) and call.log.allows(level):
            await call.log.log(level, params.get("data"), params.get("logger"))
    elif isinstance(method, str):
        await call.request.emit(message)


async def answer(event: Ask, call: CallContext) -> None:
    """A worker's server-to-client request, asked of the client through the call's own ``Outbound``; the answer
    goes back to the worker's reply address."""
    method, params = event.method, event.params
    if not call.outbound.can_request:
        answer: dict[str, Any] = {"error": InternalError(f"{method} cannot reach this client").to_wire()}
    else:
        answer = await call.outbound.request(method, params)
    await messaging(address=event.reply).send(event.reply, Answer(event.id, answer).to_wire())
