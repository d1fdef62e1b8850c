"""The life of a durable call in the serving process: the register of running work, follow/settle/announce, the
cancel listener, and the one ``cancel(record)``.

- ``follow(record, work, ...)``: ``work`` (an asyncio task of this process) is the call of ``record``. It is
  registered (by task id: a ``cancel`` in this process stops it at once), listens for cancellations from other
  processes on the record's task group (``events.task_group``; a cancellation recorded before it listened is
  read from the record), and when it ends its outcome settles the record (``outcomes.columns``, one conditional
  UPDATE: a cancelled or otherwise terminal record keeps its state); ``announce`` is awaited after a settlement
  that moved the record, and after work stopped by a cancellation.
- ``cancel(record, message)``: every cancellation of every kind of durable call goes through it (the paths:
  docs/workers.md): the record is marked ``cancelled`` (unless terminal), then ``stop(record)`` stops its work
  wherever it runs; ``cancel_now`` is the same from synchronous code (the admin). ``stop`` alone serves a record
  settled otherwise (the reaper fails calls past their deadline). ``Cancel`` is the message that stops work in
  another process, ``StatusChanged`` the one that wakes its waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async

from ...channel_layer import LAYER_ERRORS, Subscription, local_bus, messaging
from ...events import TASK_CANCEL_EVENT, TASK_STATUS_EVENT, Event, task_group
from ...models import ToolTask
from ...observability import metrics
from ...protocol.context import InvalidToolArguments
from ...protocol.errors import ProtocolError

logger = logging.getLogger("mcp_app.runtime.durable")

# Work of durable calls running in this process, by task id; everything of this module that must outlive the
# request that started it, referenced until done (the listeners for cancellations from other processes too: each
# ends by itself soon after its work, see ``_listen_for_cancel``).
_running: dict[str, asyncio.Task[Any]] = {}
_background: set[asyncio.Task[Any]] = set()
# What else stops a record of an execution kind when it is cancelled (``stop_with``).
_stoppers: dict[str, list[Callable[[ToolTask], None]]] = {}

Announce = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Cancel(Event):
    """``tasks/cancel`` of a durable call's work: its work stops wherever it runs."""

    KIND: ClassVar[str] = TASK_CANCEL_EVENT


@dataclass(frozen=True, slots=True)
class StatusChanged(Event):
    """A durable call's status moved: its waiters (``tasks/result``, in any process) re-read the record."""

    KIND: ClassVar[str] = TASK_STATUS_EVENT


def keep(work: asyncio.Task[Any]) -> asyncio.Task[Any]:
    """Reference ``work`` until it is done."""
    _background.add(work)
    work.add_done_callback(_background.discard)
    return work


def running(task_id: str) -> asyncio.Task[Any] | None:
    """The work of ``task_id`` when it runs in this process."""
    return _running.get(task_id)


async def drain(within: float = 5.0) -> None:
    """Wait (at most ``within`` seconds, else ``TimeoutError``) for the work this module follows, its settlements
    and its cancel listeners to end: tests, shutdown. Nothing of it is left receiving when the loop closes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    # Only this loop's work: work of a loop that has closed (a test's) can never end.
    while pending := {work for work in _background if work.get_loop() is loop}:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"durable work still running: {sorted(repr(work.get_coro()) for work in pending)}")
        await asyncio.wait(pending, timeout=remaining)


def follow(
    record: ToolTask,
    work: asyncio.Task[Any],
    *,
    columns: Callable[[Any], dict[str, Any]],
    announce: Announce | None = None,
) -> None:
    """Settle ``record`` from ``work`` when it ends, and let a ``cancel`` from any process stop it (see the module
    docstring). ``columns``: how an outcome settles this kind of record."""
    task_id = record.task_id
    _running[task_id] = work
    keep(work)
    metrics.worker_call("running", 1)
    keep(asyncio.ensure_future(_listen_for_cancel(task_id, work)))

    async def settle(done: asyncio.Task[Any]) -> None:
        if done.cancelled():
            # A cancel recorded ``cancelled`` first; a shutdown leaves the record for orphan recovery, and says
            # nothing.
            if announce is not None:
                current = await database_sync_to_async(ToolTask.objects.filter(pk=record.pk).first)()
                if current is not None and current.status == ToolTask.Status.CANCELLED:
                    await announce()
            return
        outcome = done.exception() or done.result()
        if isinstance(outcome, BaseException) and not isinstance(outcome, ProtocolError | InvalidToolArguments):
            logger.error("task %s of tool %s failed", task_id[:8], record.tool_name, exc_info=outcome)
        moved = await sync_to_async(ToolTask.objects.transition, thread_sensitive=True)(record.pk, **columns(outcome))
        if moved and announce is not None:
            await announce()

    def on_done(done: asyncio.Task[Any]) -> None:
        metrics.worker_call("running", -1)
        if _running.get(task_id) is done:
            del _running[task_id]
        keep(asyncio.ensure_future(settle(done)))

    work.add_done_callback(on_done)


async def _listen_for_cancel(task_id: str, work: asyncio.Task[Any]) -> None:
    """Stop ``work`` when a cancel for ``task_id`` comes from another process; end when ``work`` has ended.

    It ends by watching its work, never by being cancelled: a cancellation can be lost on the way (redis-py on
    Python 3.11 drops one that lands while it sends a command, e.g. the ``group_add`` of ``subscribe``), and a
    listener that lost it would keep its subscription receiving until the event loop closes."""
    bus = messaging()
    if bus is local_bus:
        return  # no other process: a cancel finds the work in the register

    def heard(message: dict[str, Any]) -> bool:
        if Cancel.from_wire(message) is not None:
            work.cancel()
            return True
        return False

    delay = 0.05
    subscription: Subscription | None = None
    while subscription is None:  # retrying while the layer is down: a cancel from other processes must reach it
        if work.done():
            return
        try:
            subscription = await bus.subscribe(task_group(task_id), on_message=heard)
        except LAYER_ERRORS:
            await asyncio.wait((work,), timeout=delay)
            delay = min(delay * 2, 2.0)
    ended = asyncio.ensure_future(subscription.ended.wait())
    try:
        # A cancellation sent before the join reached nobody: the record, changed before any is sent, says so.
        cancelled = ToolTask.objects.filter(task_id=task_id, status=ToolTask.Status.CANCELLED)
        if not work.done() and await database_sync_to_async(cancelled.exists)():
            work.cancel()
            return
        await asyncio.wait((work, ended), return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
        await subscription.close()


def stop_with(execution: str, stopper: Callable[[ToolTask], None]) -> None:
    """Also call ``stopper(record)`` (synchronous, may block) when a record of ``execution`` is stopped."""
    stoppers = _stoppers.setdefault(execution, [])
    if stopper not in stoppers:
        stoppers.append(stopper)


async def cancel(record: ToolTask, message: str = "Cancelled by the client") -> bool:
    """Cancel ``record`` and stop its work wherever it runs; returns whether the record moved (a terminal one
    stays as it is). A worker call is stopped even when someone else recorded the cancellation first: every
    stop is idempotent, and a worker that heard one already ignores the next. A worker call dispatched without
    its record (no pk) leaves a ``cancelled`` tombstone that the worker taking it respects."""
    if record.pk is None:
        moved: bool = await database_sync_to_async(ToolTask.objects.cancel_unwritten)(record, message)
    else:
        moved = await database_sync_to_async(ToolTask.objects.cancel)(record.pk, message)
    if _stops(record, moved):
        await stop(record)
    return moved


def cancel_now(record: ToolTask, message: str = "Cancelled by an administrator") -> bool:
    """``cancel`` from synchronous code (the admin): the record is written in this thread, on its connection."""
    moved = ToolTask.objects.cancel(record.pk, message)
    if _stops(record, moved):
        async_to_sync(stop)(record)
    return moved


def _stops(record: ToolTask, moved: bool) -> bool:
    return moved or record.execution in _stoppers


async def stop(record: ToolTask) -> None:
    """Stop the work of ``record``: here (the register), and through its task group in every other process and
    on the in-process bus (a worker call run in this process listens there); then its kind's stoppers."""
    local = _running.get(record.task_id)
    if local is not None:
        loop = local.get_loop()
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            local.cancel()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(local.cancel)  # the admin's thread: the work runs on the server's loop
    stoppers = _stoppers.get(record.execution, ())
    if local is None or stoppers:
        event = Cancel().to_wire()
        await local_bus.group_send(task_group(record.task_id), event)
        bus = messaging()
        if bus is not local_bus:
            with contextlib.suppress(*LAYER_ERRORS):
                await bus.group_send(task_group(record.task_id), event)
    for stopper in stoppers:
        await sync_to_async(stopper, thread_sensitive=False)(record)
