"""Running one worker call where it runs: a Celery worker, or the serving process when no broker is configured.

``execute(record_pk, celery_id, info)`` takes the record (``records.begin``), rebuilds the call's context from it
and ``info`` (what the awaiting process knew of the request: era, log level, whether progress was asked for and
whether server-to-client requests can be carried), runs the tool with the inline ``Runner`` (so validation,
output checks and error results are the same as inline), stores the outcome (``records.store``) and only then
returns; the Celery task acknowledges its message after that.

Events travel on the channel layer to ``events.worker_group(task_id)``, where every process awaiting the call
listens (``runner.WorkerRunner``): ``notify`` (a progress or log notification), ``request`` (elicitation or
sampling: the awaiting process asks the client and answers on this call's own channel) and ``done`` (the outcome
is stored: read the record). Where no channel layer exists, a process-local bus carries the same events.

Cancellation reaches the call on ``events.task_group(task_id)`` (``tasks/cancel``, the admin's ``cancel_task``,
the runner of a cancelled request): the tool's ``ctx.cancelled`` turns true and its coroutine is cancelled.
Past its deadline a call is failed (-32001) the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
import time
from collections import defaultdict
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, receive_forever
from ..events import STOP_EVENT, TASK_CANCEL_EVENT, WORKER_ANSWER, WORKER_EVENT, task_group, worker_group
from ..observability import metrics
from ..process import owner_id
from ..protocol.context import (
    InvalidToolArguments,
    LogReporter,
    Principal,
    ProgressReporter,
    RequestContext,
    ServerDescription,
    ToolCall,
    ToolRunner,
)
from ..protocol.errors import InvalidParams, ProtocolError
from ..protocol.ports import NO_CHANNEL
from . import quotas, records

logger = logging.getLogger("mcp_app.workers")

# A placeholder progress token on the worker side: the awaiting process reports with the client's own.
_TOKEN = 0
# A call's requests to the client wait at most this long for an answer (and never past the deadline).
ASK_TIMEOUT_SECONDS = 300.0


class LocalBus:
    """The events of worker calls that run in this process (no broker), and their cancellation: the same shapes
    as on the channel layer. ``send`` may be called from any thread (the admin's cancel runs in one)."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[asyncio.Queue[dict[str, Any]], asyncio.AbstractEventLoop]] = defaultdict(dict)
        self._lock = threading.Lock()

    def join(self, group: str) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        with self._lock:
            self.groups[group][queue] = asyncio.get_running_loop()
        return queue

    def leave(self, group: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        with self._lock:
            members = self.groups.get(group)
            if members is not None:
                members.pop(queue, None)
                if not members:
                    self.groups.pop(group, None)

    def send(self, group: str, message: dict[str, Any]) -> None:
        with self._lock:
            members = list(self.groups.get(group, {}).items())
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for queue, loop in members:
            if loop is running:
                queue.put_nowait(message)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, message)


local_bus = LocalBus()
LOCAL_PREFIX = "local."  # reply channels on the local bus


def own_layer() -> Any:
    """A channel layer of this call's own, for a call on a Celery worker: the process-wide layer keeps receive
    state bound to one event loop, while each call there runs in an event loop of its own (several at once with
    a thread pool). ``None`` when no layer is configured."""
    from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

    if get_channel_layer() is None:
        return None
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


async def close_layer(layer: Any) -> None:
    close = getattr(layer, "close_pools", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


class Relay:
    """The worker side of one call's events."""

    def __init__(self, task_id: str, layer: Any = ...) -> None:
        self.group = worker_group(task_id)
        self.layer = get_channel_layer() if layer is ... else layer
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._channel: str | None = None
        self._local_queue: asyncio.Queue[dict[str, Any]] | None = None
        self._pump: asyncio.Task[None] | None = None

    async def publish(self, event: dict[str, Any]) -> None:
        message = {"type": WORKER_EVENT, **event}
        if self.layer is None:
            local_bus.send(self.group, message)
            return
        try:
            await self.layer.group_send(self.group, message)
        except LAYER_ERRORS as error:  # the call goes on; its outcome is in the record
            logger.warning("could not relay a worker event (%s): %s", type(error).__name__, error)

    async def notify(self, message: dict[str, Any]) -> None:
        await self.publish({"kind": "notify", "message": message})

    async def ask(self, method: str, params: dict[str, Any], *, within: float) -> dict[str, Any]:
        """A server-to-client request, carried by whichever process awaits the call; its answer comes back."""
        reply = await self._reply_address()
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[request_id] = future
        try:
            await self.publish(
                {"kind": "request", "id": request_id, "method": method, "params": params, "reply": reply}
            )
            return await asyncio.wait_for(future, within)
        except TimeoutError:
            return {"error": {"code": -32001, "message": f"The client did not answer {method} in time"}}
        finally:
            self._answers.pop(request_id, None)

    async def _reply_address(self) -> str:
        if self._channel is not None:
            return self._channel
        if self.layer is None:
            self._channel = f"{LOCAL_PREFIX}{id(self)}"
            self._local_queue = local_bus.join(self._channel)
            self._pump = asyncio.ensure_future(self._pump_local())
        else:
            self._channel = await self.layer.new_channel()
            self._pump = asyncio.ensure_future(self._pump_layer())
        return self._channel

    def _answer(self, message: dict[str, Any]) -> None:
        if message.get("type") != WORKER_ANSWER:
            return
        future = self._answers.get(int(message.get("id", 0)))
        if future is not None and not future.done():
            answer = message.get("answer")
            future.set_result(answer if isinstance(answer, dict) else {"error": {"code": -32603, "message": "?"}})

    async def _pump_layer(self) -> None:
        assert self.layer is not None and self._channel is not None
        async for message in receive_forever(self.layer, self._channel):
            if message.get("type") == STOP_EVENT:
                return
            self._answer(message)

    async def _pump_local(self) -> None:
        assert self._local_queue is not None
        while True:
            self._answer(await self._local_queue.get())

    async def close(self) -> None:
        if self._pump is not None:
            if self.layer is not None and self._channel is not None:
                await stop_receiving(self.layer, self._channel, self._pump)
            else:
                self._pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._pump
        if self._local_queue is not None and self._channel is not None:
            local_bus.leave(self._channel, self._local_queue)


STOP_WAIT_SECONDS = 2.0


async def stop_receiving(layer: Any, channel: str, receiver: asyncio.Task[Any]) -> None:
    """End a receive loop on ``channel`` that returns on ``STOP_EVENT``: send it one, wait (bounded), and only
    then cancel (see ``events.STOP_EVENT``)."""
    if receiver.done():
        return
    with contextlib.suppress(*LAYER_ERRORS):
        await layer.send(channel, {"type": STOP_EVENT})
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(receiver), STOP_WAIT_SECONDS)
    if not receiver.done():
        receiver.cancel()
        with contextlib.suppress(BaseException):
            await receiver


class CancelListener:
    """Hears ``tasks/cancel`` (and the runner's cancellation) for one call on ``events.task_group``."""

    def __init__(self, task_id: str, on_cancel: Any, layer: Any = ...) -> None:
        self.task_id = task_id
        self.on_cancel = on_cancel
        self.joined = asyncio.Event()
        self.joined_at: float | None = None  # time.monotonic() once in the group (None: not, or it failed)
        self.layer = get_channel_layer() if layer is ... else layer
        self.channel: str | None = None
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        group = task_group(self.task_id)
        if self.layer is None:
            queue = local_bus.join(group)
            self.joined_at = time.monotonic()
            self.joined.set()
            try:
                while True:
                    message = await queue.get()
                    if message.get("type") == TASK_CANCEL_EVENT:
                        self.on_cancel()
                        return
                    if message.get("type") == STOP_EVENT:
                        return
            finally:
                local_bus.leave(group, queue)
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(group, self.channel)
        except LAYER_ERRORS as error:
            logger.warning("a worker call cannot hear cancellations (%s)", type(error).__name__)
            self.joined.set()
            return
        self.joined_at = time.monotonic()
        self.joined.set()
        try:
            async for message in receive_forever(self.layer, self.channel):
                if message.get("type") == TASK_CANCEL_EVENT:
                    self.on_cancel()
                    return
                if message.get("type") == STOP_EVENT:
                    return
        finally:
            with contextlib.suppress(*LAYER_ERRORS):
                await self.layer.group_discard(group, self.channel)

    async def close(self) -> None:
        if self.layer is None or self.channel is None:
            if self.layer is None and not self.task.done():
                local_bus.send(task_group(self.task_id), {"type": STOP_EVENT})
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.task), STOP_WAIT_SECONDS)
            if not self.task.done():
                self.task.cancel()
            return
        await stop_receiving(self.layer, self.channel, self.task)


@functools.cache
def _inline_runner() -> ToolRunner:
    """The inline runner a worker runs its calls with: one per process, not one per call."""
    from ..runtime.execution import Runner

    return Runner()


def _context(record: Any, server: Any, info: dict[str, Any]) -> RequestContext:
    from ..catalog.resolver import resolve_catalog

    return RequestContext(
        server=ServerDescription(
            server_id=server.server_id,
            name=server.name,
            title=server.title,
            version=server.version,
            instructions=server.instructions,
            pk=server.pk,
        ),
        catalog=resolve_catalog(server),
        runner=_inline_runner(),
        protocol_version=record.protocol_version,
        era=str(info.get("era") or "legacy"),
        principal=Principal(
            tenant=server.tenant.slug,
            agent_id=record.agent.agent_id,
            tenant_pk=server.tenant_id,
            agent_pk=record.agent_id,
        ),
        client_capabilities=dict(record.client_capabilities or {}),
        log_level=info.get("log_level"),
    )


def _prepare(
    record_pk: int, celery_id: str, info: dict[str, Any], marks: dict[str, float]
) -> tuple[Any, str, RequestContext | None]:
    """Take the record and build the call's context, in one trip to a database thread; ``marks["read"]`` is
    when the row returned was about to be read (``time.monotonic()``; absent: not known)."""

    def before_read() -> None:
        marks["read"] = time.monotonic()

    record, verdict = records.begin(record_pk, celery_id, owner_id(), before_read)
    if verdict != "run" or record is None:
        return record, verdict, None
    # begin loaded the server, its tenant and the agent with the record
    return record, verdict, _context(record, record.server, info)


async def execute(record_pk: int, celery_id: str, info: dict[str, Any], *, layer: Any = ...) -> str:
    """Run the call of record ``record_pk`` (dispatched as ``celery_id``) to its stored outcome; returns what
    happened: "stored", "cancelled", or why it did not run. ``layer``: the channel layer to use (default: the
    process's)."""
    flag = threading.Event()
    running: list[asyncio.Future[Any]] = []

    def cancel() -> None:
        flag.set()
        for work in running:
            work.cancel()

    # The call's task id comes with a Celery message: the cancellation group is joined while the record is
    # taken. A cancellation is recorded before it is sent, so once the join is known to have completed before
    # the row taken was read, that row shows any earlier cancellation and the group hears any later one;
    # otherwise (or without the id) the record is read once more after joining.
    known = info.get("task_id")
    listener = CancelListener(str(known), cancel, layer) if known else None
    marks: dict[str, float] = {}
    try:
        record, verdict, ctx = await database_sync_to_async(_prepare)(record_pk, celery_id, info, marks)
    except BaseException:
        if listener is not None:
            await listener.close()
        raise
    if verdict != "run" or ctx is None:
        if listener is not None:
            await listener.close()
        if record is not None:
            await Relay(record.task_id, layer).publish({"kind": "done"})  # awaiters re-read the record
        return verdict
    if listener is not None and listener.task_id != record.task_id:
        await listener.close()
        listener = None
    relay = Relay(record.task_id, layer)

    async def emit(message: dict[str, Any]) -> None:
        await relay.notify(message)

    deadline = record.deadline.timestamp() if record.deadline else time.time() + records.timeout_of(None)
    ctx.emit = emit
    ctx.outbound = _WorkerOutbound(relay, deadline) if info.get("can_ask") else NO_CHANNEL
    call = ToolCall(
        request=ctx,
        progress=ProgressReporter(_TOKEN if info.get("progress") else None, emit),
        log=LogReporter(info.get("log_level"), emit),
        input_responses=record.input_responses or info.get("input_responses") or None,
        request_state=record.request_state or info.get("request_state") or None,
        in_task=bool(info.get("in_task")),
        cancelled=flag.is_set,
    )
    tool = ctx.catalog.tool(record.tool_name)
    outcome: Any
    metrics.worker_call("running", 1)
    try:
        if tool is None:
            outcome = InvalidParams(f"Tool {record.tool_name} is no longer available")
        else:
            work = asyncio.ensure_future(ctx.runner.call_tool(tool, dict(record.arguments), call))
            running.append(work)
            if flag.is_set():  # heard while the record was taken
                work.cancel()
            joined_at = listener.joined_at if listener is not None else None
            read_at = marks.get("read")
            recheck = joined_at is None or read_at is None or joined_at > read_at
            if record.status == "cancelled":  # cancelled between taking the record and reading it
                cancel()
            if listener is None:
                listener = CancelListener(record.task_id, cancel, layer)
            if recheck:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(listener.joined.wait(), 2.0)
                # A cancellation recorded before this worker listened is honoured now.
                current = await database_sync_to_async(records.load)(record_pk)
                if current is not None and current.status == "cancelled":
                    cancel()
            done, _pending = await asyncio.wait({work}, timeout=max(0.0, deadline - time.time()))
            if not done:
                flag.set()
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
                outcome = ProtocolError(f"Tool {record.tool_name} did not finish in time", code=-32001)
            elif work.cancelled():
                outcome = None
            else:
                error = work.exception()
                if isinstance(error, InvalidToolArguments):
                    outcome = InvalidParams(f"Invalid arguments for tool {record.tool_name}: {error}")
                elif error is not None:
                    if not isinstance(error, ProtocolError):
                        logger.error("worker call of %s failed", record.tool_name, exc_info=error)
                    outcome = error
                else:
                    outcome = work.result()
        if outcome is None:
            await database_sync_to_async(records.cancel)(record_pk)
            state = "cancelled"
            await relay.publish({"kind": "done"})
        else:
            stored = await database_sync_to_async(records.store)(record_pk, outcome, celery_id=celery_id)
            state = "stored"
            # The outcome rides on the event (the awaiting process answers without reading the record) unless
            # it is large or did not stick (the record was cancelled or failed meanwhile: awaiters read it).
            await relay.publish(done_event(outcome) if stored else {"kind": "done"})
    finally:
        metrics.worker_call("running", -1)
        # Left only now: a cancellation heard after the tool returned changes nothing (the outcome stored wins,
        # or the record was cancelled first and the awaiters read it), so leaving costs the answer no time.
        if listener is not None:
            await listener.close()
        await relay.close()
    if state == "cancelled" or outcome_is_final(outcome):
        # The call's quota slot, in case nobody awaits it in the serving process any more (idempotent).
        await sync_to_async(quotas.release_call)(record.task_id)
    return state


def outcome_is_final(outcome: Any) -> bool:
    """Whether ``outcome`` settles the call for good (a 2026 ``input_required`` answer parks it instead)."""
    return not (isinstance(outcome, dict) and outcome.get("resultType") == "input_required")


class _WorkerOutbound:
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

    async def deliver(self, request_id: str | int, answer: dict[str, Any]) -> None:
        return None

    async def cancel(self, request_id: str | int) -> None:
        return None

    async def close_stream(self) -> bool:
        return False


MAX_EVENT_OUTCOME_BYTES = 64 * 1024


def done_event(outcome: Any) -> dict[str, Any]:
    """``done``, with the outcome as the record now holds it when it is small enough to travel."""
    if isinstance(outcome, ProtocolError):
        return {"kind": "done", "error": outcome.to_wire()}
    if isinstance(outcome, dict):
        try:
            size = len(orjson.dumps(outcome))
        except TypeError:
            return {"kind": "done"}
        if size <= MAX_EVENT_OUTCOME_BYTES:
            return {"kind": "done", "result": outcome}
    return {"kind": "done"}


async def tell_worker(task_id: str) -> None:
    """Tell the call ``task_id`` to stop, wherever it runs: in this process (the local bus) or on a worker (the
    channel layer)."""
    local_bus.send(task_group(task_id), {"type": TASK_CANCEL_EVENT})
    layer = get_channel_layer()
    if layer is None:
        return
    with contextlib.suppress(*LAYER_ERRORS):
        await layer.group_send(task_group(task_id), {"type": TASK_CANCEL_EVENT})
