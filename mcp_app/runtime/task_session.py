"""What a 2025-11-25 task says to its session, and how it waits on it, across processes.

``SessionChannel``: the session's streams as the task's background work sees them (in any process); ``announce``:
wake ``tasks/result`` waiters and tell the session of a status change; ``StatusWatch``: a waiter's subscription to
those events; ``TaskOutbound``: the call's server-to-client requests, answered at whichever process.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, Correlator, LayerMessaging, Subscription
from ..conf import mcp_settings
from ..events import Broadcast, Reply, reply_group, session_group, task_group
from ..models import ToolTask
from ..protocol import handshake_tasks as wire
from ..protocol import messages
from ..protocol.errors import InternalError
from ..protocol.ports import SendOnly
from . import durable
from .tasks import iso, wire_status

logger = logging.getLogger("mcp_app.runtime.handshake_tasks")


def task_state(task: ToolTask) -> wire.TaskState:
    return wire.TaskState(
        task_id=task.task_id,
        status=wire_status(task.status),
        status_message=task.status_message,
        created_at=iso(task.created_at),
        last_updated_at=iso(task.updated_at),
        ttl_ms=task.ttl_ms,
        poll_interval_ms=int(mcp_settings.TASK_POLL_INTERVAL_MS),
    )


async def group_send(group: str, event: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(group, event)
    except LAYER_ERRORS as error:  # a notification is best effort; the record stays the source of truth
        logger.info("could not publish to %s: %s", group, type(error).__name__)


class SessionChannel:
    """The streams of one handshake-era session, as seen by a task's background work."""

    def __init__(self, session_key: str | None, task_id: str) -> None:
        self.session_key = session_key
        self.task_id = task_id

    async def send(self, message: dict[str, Any]) -> None:
        if self.session_key is not None:
            group = session_group(self.session_key)
            await group_send(group, Broadcast(message, group).to_wire())

    async def emit(self, message: dict[str, Any]) -> None:
        """A notification of the task's call (progress, log), with the related-task ``_meta``."""
        params = message.get("params")
        await self.send({**message, "params": wire.with_related_task(params or {}, self.task_id)})

    async def status(self, task: ToolTask) -> None:
        await self.send(wire.status_notification(task_state(task)))


async def announce(task_pk: int, channel: SessionChannel) -> None:
    """After a status change: wake ``tasks/result`` waiters, and tell the session (``notifications/tasks/status``)."""
    await group_send(task_group(channel.task_id), durable.StatusChanged().to_wire())
    task: ToolTask | None = await database_sync_to_async(ToolTask.objects.load)(task_pk)
    if task is not None:
        await channel.status(task)


# tasks/result re-reads the record at least this often while it waits (a missed status event costs this much).
RESULT_RECHECK_SECONDS = 2.0


class StatusWatch:
    """A task's status events on its group (in any process), queued for a waiter (``durable.until_settled``)."""

    def __init__(self, task_id: str) -> None:
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._group = task_group(task_id)
        self._subscription: Subscription | None = None

    async def __aenter__(self) -> StatusWatch:
        layer = get_channel_layer()
        if layer is not None:
            try:
                self._subscription = await LayerMessaging(layer).subscribe(self._group, on_message=self._heard)
            except LAYER_ERRORS as error:  # no events: the waiter re-reads the record on its own schedule
                logger.info("tasks/result waits without status events: %s", type(error).__name__)
        return self

    def _heard(self, message: dict[str, Any]) -> None:
        # One queued event stands for all until the waiter reads the record: it reads it once for them.
        if durable.StatusChanged.from_wire(message) is not None and self.events.empty():
            self.events.put_nowait(message)

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._subscription is not None:
            await self._subscription.close()


class TaskOutbound(SendOnly):
    """The ``Outbound`` of a task's call (the request that created the task is answered): notifications and requests go
    to the session's streams with related-task ``_meta``; the task is ``input_required`` until the answer arrives."""

    can_request = True

    def __init__(self, session_key: str, task: ToolTask, channel: SessionChannel) -> None:
        self._session_key = session_key
        self._task = task
        self._channel = channel

    async def notify(self, message: dict[str, Any]) -> None:
        await self._channel.emit(message)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        task, channel, session_key = self._task, self._channel, self._session_key
        layer = get_channel_layer()
        if layer is None:
            return {"error": InternalError("No channel can carry this request to the client").to_wire()}
        request_id = f"mcp-host-{secrets.token_hex(12)}"
        answers = Correlator()

        def heard(message: dict[str, Any]) -> bool:
            reply = Reply.from_wire(message)
            return reply is not None and reply.id == request_id and answers.resolve(request_id, reply.answer)

        # Listen before asking: the answer may come back at once.
        subscription = await LayerMessaging(layer).subscribe(reply_group(session_key, request_id), on_message=heard)

        async def send() -> None:
            moved = await database_sync_to_async(ToolTask.objects.transition)(
                task.pk, status=ToolTask.Status.INPUT_REQUIRED, status_message="Waiting for input"
            )
            if moved:
                await announce(task.pk, channel)
            await channel.send(messages.request(request_id, method, wire.with_related_task(params, task.task_id)))

        try:
            return await answers.ask(
                request_id, send, method=method, within=mcp_settings.CLIENT_REQUEST_TIMEOUT_SECONDS
            )
        finally:
            await subscription.close()
            # An answered task goes back to ``working`` (only from ``input_required``, never out of a terminal one).
            resumed = await database_sync_to_async(ToolTask.objects.transition)(
                task.pk,
                where={"status": ToolTask.Status.INPUT_REQUIRED},
                status=ToolTask.Status.WORKING,
                status_message="",
            )
            if resumed:
                await announce(task.pk, channel)
