"""One run of a worker call (``WorkerCall``): the steps ``execute`` drives (each synchronous method a database
step, each coroutine an event-loop step). Its context comes from the message alone (``context.call_context``),
its tool runs with the ``InlineRunner``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from dataclasses import replace
from typing import Any

import orjson
from channels.db import database_sync_to_async

from ...channel_layer import LayerMessaging, Messaging
from ...heartbeat import owner as owner_id
from ...limits import quotas
from ...models import ToolTask
from ...observability import metrics
from ...protocol.context import CallContext, InvalidToolArguments, RequestContext
from ...protocol.errors import REQUEST_TIMEOUT, InvalidParams, ProtocolError
from ...protocol.ports import NO_CHANNEL, SendOnly
from ...protocol.reporters import LogReporter
from ...runtime import durable
from .. import records
from ..message import CallSpec, Done, WorkerMessage
from .context import call_context, loaded_spec
from .relay import CancelListener, Relay, RelayedProgress

logger = logging.getLogger("mcp_app.workers")

# A call's requests to the client wait at most this long for an answer (and never past the deadline).
ASK_TIMEOUT_SECONDS = 300.0


class WorkerCall:
    """One run of a worker call: what ``execute._steps`` drives (see the module docstring)."""

    def __init__(self, record_pk: int | None, celery_id: str, info: WorkerMessage, bus: Messaging) -> None:
        self.record_pk = record_pk
        self.celery_id = celery_id
        self.info = info
        self.bus = bus
        self.spec: CallSpec | None = info.call
        self.task_id: str | None = info.task_id
        self.record: ToolTask | None = None
        self.ctx: RequestContext | None = None
        self.flag = threading.Event()
        self.work: asyncio.Future[Any] | None = None
        self.listener: CancelListener | None = None
        self.relay: Relay | None = None
        self.progress: RelayedProgress | None = None
        self.began = 0.0

    def cancel(self) -> None:
        self.flag.set()
        if self.work is not None:
            self.work.cancel()

    async def listen(self) -> None:
        """Listen for the call's cancellation, before the record is taken: a cancellation recorded earlier keeps
        the record from being taken, one sent later is heard (on the channel the dispatcher enrolled in the
        call's task group: nothing to wait for; else once this worker has joined the group)."""
        if self.task_id is None:
            return
        self.listener = CancelListener(self.task_id, self.cancel, self.bus, channel=self.info.cancel_channel)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.listener.joined.wait(), JOIN_TIMEOUT_SECONDS)

    def take(self) -> str:
        """Take the record (one conditional UPDATE when the message carries the call; one INSERT when the serving
        process did not write it, ``take_unwritten``) and build the context; returns ``"run"`` or why not
        (``ToolTask.objects.begin``)."""
        owner = owner_id()
        if self.record_pk is None:
            return self._take_unwritten(owner)
        if self.spec is None or self.task_id is None:
            record, verdict = ToolTask.objects.begin(self.record_pk, self.celery_id, owner, lost=records.lost)
        elif ToolTask.objects.take(self.record_pk, self.celery_id, owner):
            self.ctx = call_context(self.spec, self.info)
            self.began = time.monotonic()
            return "run"
        else:
            record, verdict = ToolTask.objects.untaken(self.record_pk, self.celery_id, owner, lost=records.lost)
        return self._untaken(record, verdict)

    def _take_unwritten(self, owner: str) -> str:
        """Write the record of a call sent without it, ``working`` (unless a row of its task id exists: a
        tombstone, or this message's earlier delivery, which ``untaken`` judges as for any record)."""
        if self.spec is None or self.info.unwritten is None:
            return "gone"  # nothing to write it from (a malformed message)
        record = records.unwritten(self.spec, self.info.unwritten, self.celery_id)
        if ToolTask.objects.take_unwritten(record, owner):
            self.record_pk = record.pk
            self.ctx = call_context(self.spec, self.info)
            self.began = time.monotonic()
            return "run"
        self.record_pk = ToolTask.objects.pk_of(self.spec.task_id)
        if self.record_pk is None:
            return "gone"
        found, verdict = ToolTask.objects.untaken(self.record_pk, self.celery_id, owner, lost=records.lost)
        return self._untaken(found, verdict)

    def _untaken(self, record: ToolTask | None, verdict: str) -> str:
        self.record = record
        if record is not None:
            self.task_id = record.task_id
        if verdict == "run" and record is not None:
            self.spec = loaded_spec(record)
            self.info = self.info.with_call(self.spec)
            self.ctx = call_context(self.spec, self.info)
            self.began = time.monotonic()
        return verdict

    async def skip(self) -> None:
        """Not run: whoever awaits it re-reads the record."""
        await self.close()
        if self.task_id is not None:
            await Relay(self.task_id, self.bus).publish(Done())

    async def run(self) -> Any:
        """The tool, to its outcome: a result dict, a ``ProtocolError``, or ``None`` when it was cancelled."""
        assert self.ctx is not None and self.spec is not None and self.record_pk is not None  # taken
        ctx, spec, info = self.ctx, self.spec, self.info
        task_id = spec.task_id
        if self.listener is None or self.listener.task_id != task_id:
            # A message without the task id (or an older one): listen now, then honour a cancellation recorded
            # before the group was joined.
            if self.listener is not None:
                await self.listener.close()
            self.task_id = task_id
            await self.listen()
            current = await database_sync_to_async(ToolTask.objects.load)(self.record_pk)
            if current is not None and current.status == ToolTask.Status.CANCELLED:
                self.flag.set()
        self.relay = relay = Relay(task_id, self.bus)
        # A task's progress is read by tasks/get while it runs; a plain call's only by the admin (deferred).
        self.progress = RelayedProgress(relay, info.progress, self.record_pk, deferred=not info.in_task)

        async def emit(message: dict[str, Any]) -> None:
            await relay.notify(message)

        deadline = float(spec.deadline)
        outbound = _WorkerOutbound(relay, deadline) if info.can_ask else NO_CHANNEL
        ctx = replace(ctx, emit=emit, outbound=outbound)
        call = CallContext(
            request=ctx,
            # Sent to the client when it asked; always kept on the record for the admin's running calls.
            progress=self.progress,
            log=LogReporter(info.log_level, emit),
            input_responses=info.input_responses,
            request_state=info.request_state,
            in_task=info.in_task,
            cancelled=self.flag.is_set,
        )
        name = spec.tool_name
        tool = ctx.catalog.tool(name)
        if tool is None:
            return InvalidParams(f"Tool {name} is no longer available")
        metrics.worker_call("running", 1)
        try:
            self.work = work = asyncio.ensure_future(ctx.runner.call_tool(tool, dict(spec.arguments), call))
            if self.flag.is_set():  # heard before the tool started
                work.cancel()
            done, _pending = await asyncio.wait({work}, timeout=max(0.0, deadline - time.time()))
            if not done:
                self.flag.set()
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
                return ProtocolError(f"Tool {name} did not finish in time", code=REQUEST_TIMEOUT)
            if work.cancelled():
                return None
            error = work.exception()
            if isinstance(error, InvalidToolArguments):
                return InvalidParams(f"Invalid arguments for tool {name}: {error}")
            if error is not None:
                if not isinstance(error, ProtocolError):
                    logger.error("worker call of %s failed", name, exc_info=error)
                return error
            return work.result()
        finally:
            metrics.worker_call("running", -1)

    def settle(self, outcome: Any) -> bool:
        """Store the outcome (``None``: cancelled); returns whether the stored outcome is the record's."""
        assert self.record_pk is not None  # taken
        if outcome is None:
            ToolTask.objects.cancel(self.record_pk)
            return False
        columns = durable.columns(outcome, keep_answer=True)
        if self.progress is not None and self.progress.unwritten:
            columns.update(self.progress.unwritten)  # a deferred reporter's last report rides on the outcome
        return ToolTask.objects.store(self.record_pk, columns, celery_id=self.celery_id)

    async def announce(self, outcome: Any, stored: bool) -> None:
        """``done``, with the outcome when it stuck and is small (awaiters answer without reading the record),
        after the quota slot of a call that ended is given back (``give_back``); then stop listening: a
        cancellation heard after the tool returned changes nothing."""
        assert self.relay is not None
        try:
            released = await self.give_back() if outcome is None or outcome_is_final(outcome) else None
            done = done_event(outcome) if stored else Done()
            await self.relay.publish(dataclasses.replace(done, released=released) if released else done)
        finally:
            await self.close()
            self.log_line(outcome, stored)

    def log_line(self, outcome: Any, stored: bool) -> None:
        """The call's one INFO line: tool, server, tenant, agent, outcome, duration (never its arguments)."""
        spec = self.spec
        logger.info(
            "worker call %s tool=%s server=%s tenant=%s agent=%s outcome=%s duration_ms=%.1f",
            spec.task_id[:8] if spec else "",
            spec.tool_name if spec else None,
            spec.server.server_id if spec else None,
            spec.server.tenant_slug if spec else None,
            spec.agent_id if spec else None,
            outcome_label(outcome, stored),
            (time.monotonic() - self.began) * 1000 if self.began else 0.0,
        )

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.close()
        if self.relay is not None:
            await self.relay.close()

    async def give_back(self) -> bool:
        """The call's quota slot, given back before ``done`` (idempotent): its client hears the answer with the
        slot free, and the awaiting process need not give it back itself (one Redis round trip per call, not
        three); whether it may count on that (a backend it shares)."""
        assert self.spec is not None
        backend = quotas.get_quotas()
        try:
            await backend.release(self.spec.task_id, int(self.spec.server.tenant_pk), int(self.spec.agent_pk))
        except Exception as error:  # the awaiting process gives it back, or the lease expires
            logger.warning("could not release the quota slot of a worker call: %s: %s", type(error).__name__, error)
            return False
        return not (isinstance(backend, quotas.LocalQuotas) and isinstance(self.bus, LayerMessaging))


# How long a worker call waits to have joined its cancellation group before it runs anyway.
JOIN_TIMEOUT_SECONDS = 2.0


def outcome_label(outcome: Any, stored: bool) -> str:
    """How a run ended, for its log line: completed, error (a result with ``isError``), input_required,
    failed <code>, cancelled, or superseded (the record was settled by someone else meanwhile)."""
    if outcome is None:
        return "cancelled"
    if not stored:
        return "superseded"
    if isinstance(outcome, ProtocolError):
        return f"failed {outcome.code}"
    if isinstance(outcome, BaseException):
        return "failed"
    if isinstance(outcome, dict) and outcome.get("resultType") == "input_required":
        return "input_required"
    return "error" if isinstance(outcome, dict) and outcome.get("isError") else "completed"


def outcome_is_final(outcome: Any) -> bool:
    """Whether ``outcome`` settles the call for good (a 2026 ``input_required`` answer parks it instead)."""
    return not (isinstance(outcome, dict) and outcome.get("resultType") == "input_required")


class _WorkerOutbound(SendOnly):
    """The ``Outbound`` of a call on a worker: notifications and server-to-client requests travel to the
    serving process that awaits the call (``Relay``), which puts them on the client's stream; the client's
    answer comes back the same way. Answers and cancellations of other requests never reach a worker."""

    can_request = True

    def __init__(self, relay: Relay, deadline: float) -> None:
        self._relay = relay
        self._deadline = deadline

    async def notify(self, message: dict[str, Any]) -> None:
        await self._relay.notify(message)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        remaining = max(0.1, min(ASK_TIMEOUT_SECONDS, self._deadline - time.time()))
        return await self._relay.ask(method, params, within=remaining)


MAX_EVENT_OUTCOME_BYTES = 64 * 1024


def done_event(outcome: Any) -> Done:
    """``Done``, with the outcome as the record now holds it when it is small enough to travel."""
    if isinstance(outcome, ProtocolError):
        return Done(error=outcome.to_wire())
    if isinstance(outcome, dict):
        try:
            size = len(orjson.dumps(outcome))
        except TypeError:
            return Done()
        if size <= MAX_EVENT_OUTCOME_BYTES:
            return Done(result=outcome)
    return Done()
