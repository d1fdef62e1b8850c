"""The events between a worker call and the processes awaiting it, and its cancellation, on the call's
``Messaging``: ``Relay`` publishes its ``WorkerEvent``s on ``events.worker_group`` (a server-to-client request's
answer awaited with a ``Correlator``), ``CancelListener`` hears ``durable.Cancel`` on ``events.task_group`` (on
the channel its dispatcher enrolled, or one of its own); ``own_layer`` is a Celery worker thread's channel layer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer

from ...channel_layer import LAYER_ERRORS, Correlator, LayerMessaging, Messaging, Subscription, messaging
from ...events import task_group, worker_group
from ...protocol.reporters import discard
from ...runtime.durable import Cancel
from ...runtime.progress import RecordedProgress
from ..message import Answer, Ask, Notify, Progress, WorkerEvent, event_to_wire

logger = logging.getLogger("mcp_app.workers")

# How long a call runs before it receives on the cancellation channel its dispatcher enrolled: a cancellation
# sent earlier waits in the channel and is heard then (at most this much later than it would be otherwise).
RECEIVE_AFTER_SECONDS = 0.05


def own_layer() -> Any:
    """A channel layer of this call's own, for a call on a Celery worker: the process-wide layer keeps receive
    state bound to one event loop, while each call there runs in an event loop of its own (several at once with
    a thread pool). ``None`` when no layer is configured."""
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    if get_channel_layer() is None:
        return None
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


class Relay:
    """The worker side of one call's events: published to the call's event group, and the answers to its
    requests (request/reply on a subscription of its own, ``channel_layer.Correlator``)."""

    def __init__(self, task_id: str, bus: Messaging | None = None) -> None:
        self.group = worker_group(task_id)
        self.bus = bus or messaging()
        self._answers = Correlator()
        self._ids = itertools.count(1)
        self._subscription: Subscription | None = None

    async def publish(self, event: WorkerEvent) -> None:
        try:
            await self.bus.group_send(self.group, event_to_wire(event, self.group))
        except LAYER_ERRORS as error:  # the call goes on; its outcome is in the record
            logger.warning("could not relay a worker event (%s): %s", type(error).__name__, error)

    async def notify(self, message: dict[str, Any]) -> None:
        await self.publish(Notify(message))

    async def ask(self, method: str, params: dict[str, Any], *, within: float) -> dict[str, Any]:
        """A server-to-client request, carried by whichever process awaits the call; its answer comes back."""
        if self._subscription is None:
            self._subscription = await self.bus.subscribe(on_message=self._answer, stop_by_message=True)
        reply = self._subscription.address
        request_id = next(self._ids)
        event = Ask(request_id, method, params, reply)
        return await self._answers.ask(request_id, lambda: self.publish(event), method=method, within=within)

    def _answer(self, message: dict[str, Any]) -> None:
        if (answer := Answer.from_wire(message)) is not None:
            self._answers.resolve(answer.id, answer.answer)

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.close()


class RelayedProgress(RecordedProgress):
    """A worker call's progress reporter: kept on the record (``RecordedProgress``; ``deferred`` for a call that
    is not a task) and, when the client asked for progress, relayed as typed data (``Progress``); the awaiting
    process encodes it with the client's token."""

    def __init__(self, relay: Relay, wanted: bool, record_pk: int, *, deferred: bool = False) -> None:
        super().__init__(None, discard, record_pk, deferred=deferred)
        self.relay = relay
        self.wanted = wanted

    @property
    def enabled(self) -> bool:
        return self.wanted

    async def send(self, progress: float, total: float | None, message: str | None) -> None:
        await self.relay.publish(Progress(progress, total, message))


class CancelListener:
    """Hears ``tasks/cancel`` (and the runner's cancellation) for one call on ``events.task_group``: on the
    call's cancellation channel when the dispatching process enrolled it in that group (``channel``, see
    ``events.worker_cancel_channel``), else on a new channel it adds to the group itself."""

    def __init__(self, task_id: str, on_cancel: Callable[[], None], bus: Messaging, *, channel: str | None = None):
        self.task_id = task_id
        self.on_cancel = on_cancel
        self.joined = asyncio.Event()
        self.bus = bus
        self.subscription: Subscription | None = None
        self._enrolled = channel if isinstance(self.bus, LayerMessaging) else None
        self.task = asyncio.ensure_future(self._subscribe())

    async def _subscribe(self) -> None:
        group = task_group(self.task_id)
        try:
            if self._enrolled is not None:
                # Most calls end before they could hear anything, and receiving costs round trips (four per
                # message, its own stop message included): the enrolled channel holds what is sent to it until it
                # is received, so receiving starts only once the call has run for RECEIVE_AFTER_SECONDS.
                self.subscription = await self.bus.subscribe(
                    channel=self._enrolled,
                    on_message=self._ends,
                    receive_after=RECEIVE_AFTER_SECONDS,
                    stop_by_message=True,
                )
                self.subscription.adopt(group)
            else:
                self.subscription = await self.bus.subscribe(group, on_message=self._ends, stop_by_message=True)
        except LAYER_ERRORS as error:
            logger.warning("a worker call cannot hear cancellations (%s)", type(error).__name__)
        finally:
            self.joined.set()

    def _ends(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` ends the listening: a cancellation (heard: ``on_cancel``)."""
        if Cancel.from_wire(message) is not None:
            self.on_cancel()
            return True
        return False

    async def close(self) -> None:
        if not self.task.done():
            self.task.cancel()
            await asyncio.wait({self.task})
        if self.subscription is not None:
            await self.subscription.close()
