"""The routing runner (seams §1): worker tools run on a worker (a Celery worker, or this process without a
broker), everything else inline.

``RoutingRunner.call_tool`` for a tool with ``execution == "worker"``: ``start`` validates the arguments, admits
the call and joins its event group (``admission``), creates its durable record (or attaches to the call of the
same idempotency key, ``IDEMPOTENCY_META``, or re-queues a resumed task) and dispatches it; a call that only this
process can await (no key, not a task, unable to become one) is dispatched without its record, which the worker
writes when it takes it (``dispatch.dispatch_unwritten``; read by task id meanwhile, ``liveness.read_unwritten``);
``wait`` relays its events to the client until the record settles (``durable.until_settled``, ``liveness.check``
on each re-read) and returns or raises its outcome. A cancelled wait cancels the call (``durable.cancel``), except a 2026 call
with an idempotency key whose stream closed (its client will re-issue it). A task-capable tool of a 2026 client
follows ``runtime.tasks.answer_or_task``: the worker call's record becomes the task (one row).

Design: docs/workers.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async

from ...channel_layer import local_bus, messaging
from ...events import worker_group
from ...limits import quotas
from ...models import ToolTask
from ...protocol import versions
from ...protocol.context import CallContext
from ...protocol.descriptors import PromptDescriptor, ResourceDescriptor, ToolDescriptor
from ...protocol.errors import InternalError, InvalidParams, ProtocolError
from ...protocol.modern import runs_as_task
from ...runtime import durable
from ...runtime.execution import InlineRunner, validate_arguments
from ...runtime.mrtr import PARK
from .. import records
from ..message import Ask, Done, Notify, Progress, WorkerEvent
from ..running.execute import execute
from . import inbox, liveness
from .admission import listen_and_admit, release, undispatched
from .dispatch import (
    broker_configured,
    create_and_dispatch,
    dispatch_unwritten,
    request_info,
    requeue_and_dispatch,
    revoke_celery_task,
)
from .dispatch import message as _message
from .dispatch import send as _send
from .inbox import listen

logger = logging.getLogger("mcp_app.workers")

#: Where a client puts its idempotency key: ``params._meta["io.mcp-host/idempotencyKey"]`` (a string).
IDEMPOTENCY_META = "io.mcp-host/idempotencyKey"
MAX_KEY_LENGTH = 200
# The record is re-read when no event came for this long (doubling up to the maximum).
POLL_FIRST_SECONDS = 0.5
POLL_MAX_SECONDS = 5.0


def idempotency_key(call: CallContext) -> str:
    value = (call.meta or {}).get(IDEMPOTENCY_META)
    if value is None:
        return ""
    if not isinstance(value, str) or not value or len(value) > MAX_KEY_LENGTH:
        raise InvalidParams(
            f"Invalid params: _meta {IDEMPOTENCY_META} must be a string of 1 to {MAX_KEY_LENGTH} characters"
        )
    return value


@dataclass
class _Started:
    record: ToolTask
    created: bool
    queue: asyncio.Queue[WorkerEvent]
    leave: Any  # coroutine function: stop listening
    # Whether a closed stream may leave the call running (a 2026 call with an idempotency key); False once the
    # call is a task the client knows: then only explicit cancellation (tasks/cancel) ends the wait.
    detachable: bool = True
    # The call's slot of its tenant's and agent's quotas (None: nobody to count against).
    lease: quotas.Lease | None = None
    # Sends the record again as this request dispatched it (a call re-queued after its worker died, see
    # ``liveness.check``); None: the call runs in this process.
    redispatch: Any = None


def _local_done(work: asyncio.Task[Any]) -> None:
    if not work.cancelled() and work.exception() is not None:
        logger.error("an in-process worker call failed", exc_info=work.exception())


class RoutingRunner:
    """``ToolRunner`` that routes worker tools to the workers and delegates the rest to the inline runner."""

    def __init__(self, inline: InlineRunner | None = None) -> None:
        self.inline = inline or InlineRunner()

    async def read_resource(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        return await self.inline.read_resource(resource, uri, variables, call)

    async def get_prompt(
        self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        return await self.inline.get_prompt(prompt, arguments, call)

    async def call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        principal = call.request.principal
        if (
            tool.execution != "worker"
            or call.request.server.pk is None
            or principal is None
            or principal.agent_pk is None
        ):
            return await self.inline.call_tool(tool, arguments, call)
        if runs_as_task(tool, call):
            return await self._as_task(tool, arguments, call)
        started = await self.start(tool, arguments, call, private=True)
        return await self.wait(started, call)

    async def start(
        self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext, *, private: bool = False
    ) -> _Started:
        """Record (or find, or re-queue) the call, listen to its events, dispatch it. ``private``: the client
        cannot take a task; without an idempotency key nobody but this request can then await the call, so it is
        sent unwritten (the worker writes its record)."""
        validate_arguments(tool, arguments)
        key = idempotency_key(call)
        ctx = call.request
        assert ctx.server.pk is not None and ctx.principal is not None and ctx.principal.agent_pk is not None
        timeout = records.timeout_of(tool.timeout)
        info = request_info(call)
        served = records.served(call.request.server, call.request.principal)
        celery = broker_configured()
        unwritten = private and celery and served is not None and not (key or call.task_id or call.in_task)
        # The call's messages travel on the channel layer, or the in-process bus when it runs in this process.
        bus = messaging() if celery else local_bus
        # A resumed task runs again under its id (it takes a slot again), a new call under a new one. Admission
        # comes before anything is recorded or dispatched: a refused call (QuotaExceeded) never runs. The slot is
        # given back when the call settles: by ``wait`` here, or by whoever settles the record when nobody waits
        # here any more (the worker, the reaper); a dead holder's lease expires. The call's event group is joined
        # meanwhile (both are a round trip to Redis).
        task_id = call.task_id or records.new_task_id()
        queue, leave, lease = await listen_and_admit(task_id, ctx.principal, bus)
        try:
            if call.task_id:
                record = await database_sync_to_async(requeue_and_dispatch)(task_id, timeout, info, served, celery)
                created = record is not None
            elif unwritten:
                assert served is not None
                record = ToolTask.objects.worker_call(task_id=task_id, **self._fields(tool, arguments, call, key))
                created = True
                try:
                    await dispatch_unwritten(record, info, served)
                except asyncio.CancelledError:
                    # The request ended while publishing: the message may be on its way (a publishing thread
                    # goes on, an LPUSH may have reached Redis), and nobody would await it: a tombstone keeps it
                    # from running.
                    try:
                        await asyncio.shield(durable.cancel(record))
                    except Exception as error:  # the call may then run once, unawaited
                        logger.warning("could not cancel an unwritten worker call: %s", type(error).__name__)
                    raise
            else:
                record, created = await database_sync_to_async(create_and_dispatch)(
                    task_id, self._fields(tool, arguments, call, key), info, served, celery
                )
        except BaseException as error:
            await undispatched(task_id, lease, leave, bus, error)
            raise
        if record is None:
            await undispatched(task_id, lease, leave, bus)
            raise InvalidParams("The task is no longer running")
        if not created:
            # Attach to the existing call (same idempotency key), which holds its own slot.
            await undispatched(task_id, lease, leave, bus)
            lease = None
            queue, leave = await listen(worker_group(record.task_id), bus)
            record = await database_sync_to_async(ToolTask.objects.load)(record.pk) or record
        if created and not celery:
            work = durable.keep(
                asyncio.ensure_future(execute(record.pk, record.celery_id, _message(record, info, served), bus=bus))
            )
            work.add_done_callback(_local_done)
        redispatch = functools.partial(_send, info=info, served=served) if celery else None
        return _Started(record=record, created=created, queue=queue, leave=leave, lease=lease, redispatch=redispatch)

    @staticmethod
    def _fields(tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext, key: str) -> dict[str, Any]:
        """The new record's fields (``ToolTask.objects.worker_call``)."""
        ctx = call.request
        assert ctx.principal is not None
        return {
            "server_pk": ctx.server.pk,
            "agent_pk": ctx.principal.agent_pk,
            "tool_name": tool.name,
            "arguments": arguments,
            "timeout": records.timeout_of(tool.timeout),
            "client_capabilities": dict(ctx.client_capabilities),
            "protocol_version": ctx.protocol_version,
            "request_id": call.request_id,
            "idempotency_key": key,
        }

    async def wait(self, started: _Started, call: CallContext, *, cancel_on_exit: bool = True) -> dict[str, Any]:
        """Relay the call's events until its record settles (``durable.until_settled``); return or raise its
        outcome."""
        try:
            settled = await durable.until_settled(
                started.record,
                started.queue,
                read=functools.partial(_read, started),
                every=POLL_FIRST_SECONDS,
                most=POLL_MAX_SECONDS,
                on_event=functools.partial(_relay, call, started),
                on_recheck=functools.partial(_alive, started.redispatch) if started.redispatch is not None else None,
            )
            if settled is None:
                raise InternalError("The call's record is gone")
            return self._result(settled, call)
        except asyncio.CancelledError:
            if cancel_on_exit and not (started.detachable and _detaches(call)):
                await asyncio.shield(durable.cancel(started.record))
            else:
                started.lease = None  # the call goes on without us: whoever settles it gives the slot back
            raise
        finally:
            await release(started.lease)
            durable.keep(asyncio.ensure_future(started.leave()))  # stop listening off the answer's path

    @staticmethod
    def _result(record: ToolTask, call: CallContext) -> dict[str, Any]:
        """The call's outcome, from its settled record (read back, or as ``Done`` carried it): the one decoder."""
        outcome = durable.outcome_of(record)
        return outcome if call.in_task else durable.strip_internal(outcome)

    async def _as_task(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """``runtime.tasks.answer_or_task`` for a worker tool: the worker call's record is the task (one row)."""
        from ...runtime.tasks import answer_or_task

        started: _Started | None = None

        async def start(task_call: CallContext) -> Awaitable[dict[str, Any]]:
            nonlocal started
            started = await self.start(tool, arguments, task_call)
            return self.wait(started, task_call)

        async def settled(_outcome: ProtocolError | dict[str, Any]) -> ToolTask:
            assert started is not None  # the worker settled the record itself
            task: ToolTask = await database_sync_to_async(ToolTask.objects.become_task)(started.record.pk)
            return task

        async def running() -> ToolTask:
            assert started is not None
            started.detachable = False  # only tasks/cancel ends it now (``follow``: it cancels the worker call)
            task: ToolTask = await database_sync_to_async(ToolTask.objects.become_task)(started.record.pk)
            return task

        result = await answer_or_task(tool, call, start, settled=settled, running=running)
        result.pop(PARK, None)
        return result


async def _relay(call: CallContext, started: _Started, event: WorkerEvent) -> ToolTask | bool:
    """Pass a worker event on as the call's era prescribes; ``Done`` gives the settled record (carried or read),
    and says whether the worker gave the quota slot back (then ``wait`` need not)."""
    match event:
        case Notify(message=message):
            await inbox.pass_on(message, call)
        case Progress() as report:
            await inbox.progressed(report, call)
        case Ask() as ask:
            await inbox.answer(ask, call)
        case Done() as done:
            if done.released and started.lease is not None:
                started.lease.released_elsewhere()
            return _carried(done) or await _read(started) or False
    return False


async def _read(started: _Started) -> ToolTask | None:
    """The call's record as it is now: by its pk, or for a call dispatched unwritten by its task id until a row
    exists (``liveness.read_unwritten``: the record as dispatched meanwhile, sent again or failed past the queue
    timeout)."""
    if started.record.pk is not None:
        return await durable.reload(started.record.pk)
    record: ToolTask = await database_sync_to_async(liveness.read_unwritten)(started.record, started.redispatch)
    if record.pk is not None:
        started.record = record  # written now: read by its pk from here on
    return record


async def _alive(redispatch: Any, record: ToolTask) -> bool:
    """Re-dispatch or fail a call whose worker was lost (``liveness.check``); whether that moved the record."""
    if record.pk is None:
        return False  # not taken yet: ``read_unwritten`` judges it by this process's clock
    moved: bool = await database_sync_to_async(liveness.check)(record, redispatch)
    return moved


def _carried(done: Done) -> ToolTask | None:
    """The record as the outcome ``done`` carries settles it (unsaved), so that it is decoded like one read back;
    ``None`` when the outcome did not travel (too large, or announced by the reaper or liveness)."""
    if done.error is not None:
        return ToolTask(status=ToolTask.Status.FAILED, error=done.error)
    if done.result is not None:
        return ToolTask(**durable.columns(done.result, keep_answer=True))
    return None


def _detaches(call: CallContext) -> bool:
    """A closed stream of a 2026 call with an idempotency key does not cancel it (the client will re-issue)."""
    return call.request.era == versions.MODERN and bool((call.meta or {}).get(IDEMPOTENCY_META))


def _revoke(record: ToolTask) -> None:
    if record.celery_id:
        revoke_celery_task(record.celery_id)


# Cancelling a worker call also revokes its Celery message (a worker that has not started it skips it).
durable.stop_with(records.WORKER, _revoke)
