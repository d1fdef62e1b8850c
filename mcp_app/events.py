"""Cross-process events over the Channels layer: every group name and event type of the app, once, the typed
events the transport and durable calls exchange (``Event``: one ``to_wire``/``from_wire``, versioned; a message
of an older process, without ``version``, is read the same), and the publishing side. Worker calls' events are
``workers.message``'s.

``publish_to_servers`` sends catalog edits' ``list_changed`` (and ``resources/updated``) notifications to the group
of each affected server, whose open GET and ``subscriptions/listen`` streams, in any process, are its members;
after the transaction commits, and a layer failure is logged, never raised into the edit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterable
from typing import Any, ClassVar, Self

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger("mcp_app.events")

BROADCAST_EVENT = "mcp.broadcast"


def server_group(server_pk: int) -> str:
    return f"mcp.server.{server_pk}"


REPLY_EVENT = "mcp.reply"
# ``notifications/cancelled`` for a running handshake-era call (to its consumer).
CANCEL_EVENT = "mcp.cancel"
# ``tasks/cancel`` for a durable task's work (to the process running it).
TASK_CANCEL_EVENT = "mcp.task_cancel"
# A durable task's status changed (to whoever waits on it: a 2025-11-25 ``tasks/result``), on its task group.
TASK_STATUS_EVENT = "mcp.task_status"


def task_group(task_id: str) -> str:
    """Where ``tasks/cancel`` reaches the work of task ``task_id``, in whichever process runs it."""
    return f"mcp.task.{task_id[:48].replace('-', '_')}"


# An approval was decided (to the call parked or waiting on it, in whichever process), on its approval group.
APPROVAL_EVENT = "mcp.approval"


def approval_group(approval_pk: int) -> str:
    """Where the decision of approval ``approval_pk`` wakes the call that waits for it (``runtime.approvals``)."""
    return f"mcp.approval.{int(approval_pk)}"


def _id_token(request_id: str | int) -> str:
    """Client-chosen JSON-RPC ids, made safe for group names (and 1 distinct from "1")."""
    return hashlib.sha256(f"{type(request_id).__name__}:{request_id}".encode()).hexdigest()[:32]


def reply_group(scope: str, request_id: str | int) -> str:
    """Where a client's response to our request ``request_id`` is delivered."""
    return f"mcp.reply.{scope}.{_id_token(request_id)}"


def call_group(scope: str, request_id: str | int) -> str:
    """Where ``notifications/cancelled`` for the client's request ``request_id`` is delivered."""
    return f"mcp.call.{scope}.{_id_token(request_id)}"


# Worker calls (``mcp_app.workers``): what the worker running a call tells the processes awaiting it
# (progress, logs, server-to-client requests, "done"), and the answers to its requests (to its own channel).
WORKER_EVENT = "mcp.worker_event"
WORKER_ANSWER = "mcp.worker_answer"


def worker_group(task_id: str) -> str:
    """Where the worker running record ``task_id`` publishes its events; every process awaiting it is a member."""
    return f"mcp.wcall.{task_id[:48].replace('-', '_')}"


def worker_cancel_channel(task_id: str) -> str:
    """The channel (a general one: any process may receive it) on which the worker running record ``task_id``
    hears its cancellation. The dispatching process makes it a member of ``task_group(task_id)`` before it
    dispatches, so the worker needs no round trip to join and misses nothing sent before it listens (the layer
    keeps the messages of a channel until they are received or expire); the worker leaves the group when the
    call ends."""
    return f"mcp.wcancel.{task_id[:48].replace('-', '_')}"


STREAM_EVENT = "mcp.stream_event"


def stream_group(stream_id: str) -> str:
    """Where events of a stream whose client went away are published, for a reconnected GET to pick up."""
    return f"mcp.stream.{stream_id}"


def session_group(session_key: str) -> str:
    return f"mcp.session.{session_key}"


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """A typed message on the layer: ``KIND`` is its ``type``; its fields travel as they are. ``from_wire`` is
    ``None`` for a message of another kind or one whose fields do not fit (``_read`` raising ``KeyError``,
    ``TypeError`` or ``ValueError``)."""

    KIND: ClassVar[str]
    VERSION: ClassVar[int] = 1

    def to_wire(self) -> dict[str, Any]:
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return {"type": self.KIND, "version": self.VERSION, **fields}

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Self | None:
        if body.get("type") != cls.KIND:
            return None
        try:
            return cls._read(body)
        except (KeyError, TypeError, ValueError):
            logger.warning("dropped a malformed %s message", cls.KIND)
            return None

    @classmethod
    def _read(cls, body: dict[str, Any]) -> Self:
        return cls()


@dataclasses.dataclass(frozen=True, slots=True)
class Broadcast(Event):
    """A notification for every stream in a server's or a session's group. ``group`` names that group: one
    channel of a process is a member of many (``transport.fanout``), and routes by it."""

    KIND: ClassVar[str] = BROADCAST_EVENT
    message: dict[str, Any]
    group: str = ""

    @classmethod
    def _read(cls, body: dict[str, Any]) -> Self:
        return cls(_object(body["message"]), str(body.get("group", "")))


@dataclasses.dataclass(frozen=True, slots=True)
class Reply(Event):
    """The client's response to our request ``id``, for whichever process asked."""

    KIND: ClassVar[str] = REPLY_EVENT
    id: str
    answer: dict[str, Any]

    @classmethod
    def _read(cls, body: dict[str, Any]) -> Self:
        return cls(str(body["id"]), _object(body["answer"]))


@dataclasses.dataclass(frozen=True, slots=True)
class CallCancelled(Event):
    """``notifications/cancelled`` for the call a consumer serves."""

    KIND: ClassVar[str] = CANCEL_EVENT


@dataclasses.dataclass(frozen=True, slots=True)
class StreamEvent(Event):
    """Event ``sequence`` of a call whose client went away, for a resuming GET."""

    KIND: ClassVar[str] = STREAM_EVENT
    sequence: int
    message: Any

    @classmethod
    def _read(cls, body: dict[str, Any]) -> Self:
        sequence = body["sequence"]
        if not isinstance(sequence, int) or isinstance(sequence, bool):
            raise TypeError("sequence")
        return cls(sequence, body["message"])


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value


def publish_to_servers(server_pks: Iterable[int], message: dict[str, Any]) -> None:
    """Send ``message`` to every live stream of these servers once the current transaction commits."""
    pks = sorted(set(server_pks))
    if not pks:
        return

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        for pk in pks:
            try:
                group = server_group(pk)
                async_to_sync(layer.group_send)(group, Broadcast(message, group).to_wire())
            except Exception:
                logger.exception("could not publish %s to server %s", message.get("method"), pk)

    transaction.on_commit(send)
