"""Running one worker call where it runs: a Celery worker, or the serving process when no broker is configured.

The life of a call is written once (``_steps``, a generator of steps on a ``WorkerCall``): listen for its
cancellation (on the channel the dispatching process enrolled in the call's task group, so no round trip is
needed, received from once the call has run ``RECEIVE_AFTER_SECONDS``; ``events.worker_cancel_channel``); take
the record (``records.take``: one conditional UPDATE; when it does not move, ``records.begin`` says why:
terminal, superseded, a lost worker's redelivery); build the call's context from the message alone
(``info["call"]``, ``records.call_spec``: tool, arguments, the server as served with its catalog revision, the
agent; the catalog from this process's cache at that revision) and ``info`` (era, log level, whether progress
was asked for and whether server-to-client requests can be carried); run the tool with the ``InlineRunner``
(validation, output checks and error results as inline); store the outcome (``records.store``); announce
``done``; give the quota slot back. Listening before taking means a cancellation
recorded earlier keeps the record from being taken and one sent later is heard. A message without the call
(queued by an older version) still runs: the record is loaded with its relations instead.

Two drivers run the steps: ``execute()`` in an event loop (the serving process, no broker: the database steps
through ``database_sync_to_async``) and ``execute_in_thread()`` in a Celery worker thread (the database steps in
the process's main thread, or its one database thread for a thread pool; the others in the thread's own loop).
Both return only after the outcome is stored; the Celery task acknowledges its message after that.

Events travel on the channel layer to ``events.worker_group(task_id)``, where every process awaiting the call
listens (``runner.RoutingRunner``), each naming that group (``group``: a process hears the events of all the
calls it awaits on one channel): ``notify`` (a progress or log notification), ``request`` (elicitation or
sampling: the awaiting process asks the client and answers on this call's own channel) and ``done`` (the outcome
is stored: read the record). Where no channel layer exists, a process-local bus carries the same events.

Cancellation reaches the call on ``events.task_group(task_id)`` (``tasks/cancel``, the admin's ``cancel_task``,
the runner of a cancelled request, the reaper), of which the call's cancellation channel is a member from its
dispatch until the worker leaves the group as the call ends (a call whose message no worker ever ran leaves
it to the layer's group expiry): the tool's ``ctx.cancelled`` turns true and its coroutine is cancelled.
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
from collections.abc import Awaitable, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections, connection

from ..caching.identity import ServerEntry
from ..channel_layer import LAYER_ERRORS, Correlator, LayerMessaging, Subscription, messaging
from ..events import TASK_CANCEL_EVENT, WORKER_ANSWER, WORKER_EVENT, task_group, worker_group
from ..heartbeat import owner as owner_id
from ..models import ToolTask
from ..observability import metrics
from ..protocol.context import (
    InvalidToolArguments,
    LogReporter,
    Principal,
    RequestContext,
    ServerDescription,
    ToolCall,
    ToolRunner,
)
from ..protocol.errors import InvalidParams, ProtocolError
from ..protocol.ports import NO_CHANNEL, SendOnly
from ..runtime.progress import RecordedProgress
from . import quotas, records

logger = logging.getLogger("mcp_app.workers")

# A placeholder progress token on the worker side: the awaiting process reports with the client's own.
_TOKEN = 0
# A call's requests to the client wait at most this long for an answer (and never past the deadline).
ASK_TIMEOUT_SECONDS = 300.0


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
    """The worker side of one call's events: published to the call's event group, and the answers to its
    requests (request/reply on a subscription of its own, ``channel_layer.Correlator``)."""

    def __init__(self, task_id: str, layer: Any = ...) -> None:
        self.group = worker_group(task_id)
        self.layer = get_channel_layer() if layer is ... else layer
        self.bus = messaging(self.layer)
        self._answers = Correlator()
        self._ids = itertools.count(1)
        self._subscription: Subscription | None = None

    async def publish(self, event: dict[str, Any]) -> None:
        message = {"type": WORKER_EVENT, "group": self.group, **event}
        try:
            await self.bus.group_send(self.group, message)
        except LAYER_ERRORS as error:  # the call goes on; its outcome is in the record
            logger.warning("could not relay a worker event (%s): %s", type(error).__name__, error)

    async def notify(self, message: dict[str, Any]) -> None:
        await self.publish({"kind": "notify", "message": message})

    async def ask(self, method: str, params: dict[str, Any], *, within: float) -> dict[str, Any]:
        """A server-to-client request, carried by whichever process awaits the call; its answer comes back."""
        if self._subscription is None:
            self._subscription = await self.bus.subscribe(on_message=self._answer, stop_by_message=True)
        reply = self._subscription.address
        request_id = next(self._ids)
        event = {"kind": "request", "id": request_id, "method": method, "params": params, "reply": reply}
        return await self._answers.ask(request_id, lambda: self.publish(event), method=method, within=within)

    def _answer(self, message: dict[str, Any]) -> None:
        if message.get("type") == WORKER_ANSWER:
            answer = message.get("answer")
            self._answers.resolve(
                int(message.get("id", 0)),
                answer if isinstance(answer, dict) else {"error": {"code": -32603, "message": "?"}},
            )

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.close()


class CancelListener:
    """Hears ``tasks/cancel`` (and the runner's cancellation) for one call on ``events.task_group``: on the
    call's cancellation channel when the dispatching process enrolled it in that group (``channel``, see
    ``events.worker_cancel_channel``: no round trip to join; it receives from it once the call has run for
    ``RECEIVE_AFTER_SECONDS``, so a short call never pays for receiving), else on a new channel it adds to the
    group itself."""

    def __init__(self, task_id: str, on_cancel: Callable[[], None], layer: Any = ..., *, channel: str | None = None):
        self.task_id = task_id
        self.on_cancel = on_cancel
        self.joined = asyncio.Event()
        self.bus = messaging(get_channel_layer() if layer is ... else layer)
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
        if message.get("type") == TASK_CANCEL_EVENT:
            self.on_cancel()
            return True
        return False

    async def close(self) -> None:
        if not self.task.done():
            self.task.cancel()
            await asyncio.wait({self.task})
        if self.subscription is not None:
            await self.subscription.close()


@functools.cache
def _inline_runner() -> ToolRunner:
    """The inline runner a worker runs its calls with: one per process, not one per call."""
    from ..runtime.execution import InlineRunner

    return InlineRunner()


@dataclass(frozen=True)
class _CatalogKey:
    """What ``resolve_catalog`` keys a server's catalog by, as the dispatching process saw it."""

    pk: int
    tenant_id: int
    catalog_version: int
    created_at: datetime


def _context(spec: dict[str, Any], info: dict[str, Any]) -> RequestContext:
    """The call's context from the Celery message alone (``records.call_spec``): no query, and the catalog from
    this process's cache at the revision the client was served."""
    from ..catalog.resolver import resolve_catalog

    server = spec["server"]
    key = _CatalogKey(
        pk=int(server["pk"]),
        tenant_id=int(server["tenant_pk"]),
        catalog_version=int(server["catalog_version"]),
        created_at=datetime.fromisoformat(str(server["created_at"])),
    )
    return RequestContext(
        server=ServerDescription(
            server_id=str(server["server_id"]),
            name=str(server["name"]),
            title=str(server.get("title") or ""),
            version=str(server.get("version") or ""),
            instructions=str(server.get("instructions") or ""),
            pk=key.pk,
        ),
        catalog=resolve_catalog(key),
        runner=_inline_runner(),
        protocol_version=str(spec["protocol_version"]),
        era=str(info.get("era") or "legacy"),
        principal=Principal(
            tenant=str(server["tenant_slug"]),
            agent_id=str(spec["agent_id"]),
            tenant_pk=key.tenant_id,
            agent_pk=int(spec["agent_pk"]),
        ),
        client_capabilities=dict(spec.get("client_capabilities") or {}),
        log_level=info.get("log_level"),
    )


def _loaded_spec(record: ToolTask) -> dict[str, Any]:
    """``records.call_spec`` of a record loaded with its server, tenant and agent (a message without one)."""
    server = record.server
    described = records.served(
        ServerEntry.of(server).description(),
        Principal(
            tenant=server.tenant.slug,
            agent_id=record.agent.agent_id,
            tenant_pk=server.tenant_id,
            agent_pk=record.agent_id,
        ),
    )
    assert described is not None  # every part of it is known here
    return records.call_spec(record, server=described[0], agent_id=described[1])


@dataclass(frozen=True)
class _Sync:
    """A step of ``_steps`` that runs as plain synchronous code: a database step (``database``; ``fresh``: the
    first of the call, which retires an old or broken connection first) or another blocking one."""

    function: Callable[[], Any]
    database: bool = True
    fresh: bool = False

    def __call__(self) -> Any:
        if self.fresh and not connection.in_atomic_block:  # never retire a connection inside a transaction
            close_old_connections()
        return self.function()


@dataclass(frozen=True)
class _Async:
    """A step of ``_steps`` that runs in the call's event loop."""

    coroutine: Callable[[], Awaitable[Any]]


class WorkerCall:
    """One run of a worker call: what ``_steps`` drives. Its synchronous methods touch the database and its
    coroutines the event loop, never both."""

    def __init__(self, record_pk: int, celery_id: str, info: dict[str, Any], layer: Any) -> None:
        self.record_pk = record_pk
        self.celery_id = celery_id
        self.info = info
        self.layer = layer
        self.spec: dict[str, Any] | None = info.get("call") if isinstance(info.get("call"), dict) else None
        self.task_id: str | None = str(info["task_id"]) if info.get("task_id") else None
        self.record: ToolTask | None = None
        self.ctx: RequestContext | None = None
        self.flag = threading.Event()
        self.work: asyncio.Future[Any] | None = None
        self.listener: CancelListener | None = None
        self.relay: Relay | None = None
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
        enrolled = self.info.get("cancel_channel")
        self.listener = CancelListener(
            self.task_id, self.cancel, self.layer, channel=str(enrolled) if enrolled else None
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.listener.joined.wait(), JOIN_TIMEOUT_SECONDS)

    def take(self) -> str:
        """Take the record (one conditional UPDATE when the message carries the call) and build the context;
        returns ``"run"`` or why not (``records.begin``)."""
        owner = owner_id()
        if self.spec is None or self.task_id is None:
            record, verdict = records.begin(self.record_pk, self.celery_id, owner)
        elif records.take(self.record_pk, self.celery_id, owner):
            self.ctx = _context(self.spec, self.info)
            self.began = time.monotonic()
            return "run"
        else:
            record, verdict = records.untaken(self.record_pk, self.celery_id, owner)
        self.record = record
        if record is not None:
            self.task_id = record.task_id
        if verdict == "run" and record is not None:
            self.spec = _loaded_spec(record)
            self.ctx = _context(self.spec, self.info)
            self.began = time.monotonic()
        return verdict

    async def skip(self) -> None:
        """Not run: whoever awaits it re-reads the record."""
        await self.close()
        if self.task_id is not None:
            await Relay(self.task_id, self.layer).publish({"kind": "done"})

    async def run(self) -> Any:
        """The tool, to its outcome: a result dict, a ``ProtocolError``, or ``None`` when it was cancelled."""
        assert self.ctx is not None and self.spec is not None
        ctx, spec, info = self.ctx, self.spec, self.info
        task_id = str(spec["task_id"])
        if self.listener is None or self.listener.task_id != task_id:
            # A message without the task id (or an older one): listen now, then honour a cancellation recorded
            # before the group was joined.
            if self.listener is not None:
                await self.listener.close()
            self.task_id = task_id
            await self.listen()
            current = await database_sync_to_async(records.load)(self.record_pk)
            if current is not None and current.status == ToolTask.Status.CANCELLED:
                self.flag.set()
        self.relay = relay = Relay(task_id, self.layer)

        async def emit(message: dict[str, Any]) -> None:
            await relay.notify(message)

        deadline = float(spec["deadline"])
        ctx.emit = emit
        ctx.outbound = _WorkerOutbound(relay, deadline) if info.get("can_ask") else NO_CHANNEL
        call = ToolCall(
            request=ctx,
            # Sent to the client when it asked; always kept on the record for the admin's running calls.
            progress=RecordedProgress(_TOKEN if info.get("progress") else None, emit, self.record_pk),
            log=LogReporter(info.get("log_level"), emit),
            input_responses=spec.get("input_responses") or info.get("input_responses") or None,
            request_state=spec.get("request_state") or info.get("request_state") or None,
            in_task=bool(info.get("in_task")),
            cancelled=self.flag.is_set,
        )
        name = str(spec["tool_name"])
        tool = ctx.catalog.tool(name)
        if tool is None:
            return InvalidParams(f"Tool {name} is no longer available")
        metrics.worker_call("running", 1)
        try:
            self.work = work = asyncio.ensure_future(ctx.runner.call_tool(tool, dict(spec["arguments"]), call))
            if self.flag.is_set():  # heard before the tool started
                work.cancel()
            done, _pending = await asyncio.wait({work}, timeout=max(0.0, deadline - time.time()))
            if not done:
                self.flag.set()
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
                return ProtocolError(f"Tool {name} did not finish in time", code=-32001)
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
        if outcome is None:
            ToolTask.objects.cancel(self.record_pk)
            return False
        return records.store(self.record_pk, outcome, celery_id=self.celery_id)

    async def announce(self, outcome: Any, stored: bool) -> None:
        """``done``, with the outcome when it stuck and is small (awaiters answer without reading the record);
        then stop listening: a cancellation heard after the tool returned changes nothing."""
        assert self.relay is not None
        try:
            await self.relay.publish(done_event(outcome) if stored else {"kind": "done"})
        finally:
            await self.close()
            self.log_line(outcome, stored)

    def log_line(self, outcome: Any, stored: bool) -> None:
        """The call's one INFO line: tool, server, tenant, agent, outcome, duration (never its arguments)."""
        spec = self.spec or {}
        server = spec.get("server") or {}
        logger.info(
            "worker call %s tool=%s server=%s tenant=%s agent=%s outcome=%s duration_ms=%.1f",
            str(spec.get("task_id") or "")[:8],
            spec.get("tool_name"),
            server.get("server_id"),
            server.get("tenant_slug"),
            spec.get("agent_id"),
            outcome_label(outcome, stored),
            (time.monotonic() - self.began) * 1000 if self.began else 0.0,
        )

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.close()
        if self.relay is not None:
            await self.relay.close()

    def release(self) -> None:
        """The call's quota slot, in case nobody awaits it in the serving process any more (idempotent)."""
        if self.task_id is not None:
            quotas.release_call(self.task_id)


# How long a worker call waits to have joined its cancellation group before it runs anyway.
JOIN_TIMEOUT_SECONDS = 2.0
# How long a call runs before it receives on the cancellation channel its dispatcher enrolled: a cancellation
# sent earlier waits in the channel and is heard then (at most this much later than it would be otherwise).
RECEIVE_AFTER_SECONDS = 0.05

Step = _Sync | _Async


def _steps(call: WorkerCall) -> Generator[Step, Any, str]:
    """The life of one worker call, written once for both drivers (``execute`` in an event loop,
    ``execute_in_thread`` in a Celery worker thread): listen, take the record, run, store, announce, release."""
    yield _Async(call.listen)
    try:
        verdict = yield _Sync(call.take, fresh=True)
    except BaseException:
        yield _Async(call.close)
        raise
    if verdict != "run":
        yield _Async(call.skip)
        return str(verdict)
    try:
        outcome = yield _Async(call.run)
        stored = yield _Sync(functools.partial(call.settle, outcome))
    except BaseException:
        yield _Async(call.close)
        raise
    yield _Async(functools.partial(call.announce, outcome, stored))
    if outcome is None or outcome_is_final(outcome):
        yield _Sync(call.release, database=False)
    return "cancelled" if outcome is None else "stored"


class _Stepper:
    """Feeds ``_steps`` what each of its steps gave (a value, or the exception it raised, which the steps may
    handle or re-raise); ``step`` is the next one to run, ``None`` once ``state`` says how the call ended."""

    def __init__(self, call: WorkerCall) -> None:
        self._steps = _steps(call)
        self.step: Step | None = next(self._steps)
        self.state = ""

    def succeed(self, value: Any) -> None:
        self._advance(lambda: self._steps.send(value))

    def fail(self, error: BaseException) -> None:
        self._advance(lambda: self._steps.throw(error))

    def _advance(self, resume: Callable[[], Step]) -> None:
        try:
            self.step = resume()
        except StopIteration as end:
            self.step, self.state = None, str(end.value)


async def execute(record_pk: int, celery_id: str, info: dict[str, Any], *, layer: Any = ...) -> str:
    """Run the call of record ``record_pk`` (dispatched as ``celery_id``) to its stored outcome, in this event
    loop (no broker: the serving process); returns what happened: "stored", "cancelled", or why it did not run.
    ``layer``: the channel layer to use (default: the process's)."""
    stepper = _Stepper(WorkerCall(record_pk, celery_id, info, get_channel_layer() if layer is ... else layer))
    while (step := stepper.step) is not None:
        try:
            if isinstance(step, _Sync):
                value = await (database_sync_to_async if step.database else sync_to_async)(step.function)()
            else:
                value = await step.coroutine()
        except BaseException as error:
            stepper.fail(error)
        else:
            stepper.succeed(value)
    return stepper.state


def execute_in_thread(
    loop: asyncio.AbstractEventLoop, record_pk: int, celery_id: str, info: dict[str, Any], *, layer: Any
) -> str:
    """``execute`` in a Celery worker thread, between turns of the thread's own event ``loop`` (which runs the
    other steps). Database steps run in the thread itself when it is the process's main thread (prefork, solo:
    one connection per process either way); a thread of a thread pool hands them to the process's one database
    thread instead, so that 50 threads do not hold 50 connections."""
    stepper = _Stepper(WorkerCall(record_pk, celery_id, info, layer))
    here = threading.current_thread() is threading.main_thread()
    while (step := stepper.step) is not None:
        try:
            if isinstance(step, _Async):
                value = loop.run_until_complete(step.coroutine())
            elif here or not step.database:
                value = step()
            else:
                value = _database_thread().submit(step).result()
        except BaseException as error:
            stepper.fail(error)
        else:
            stepper.succeed(value)
    return stepper.state


@functools.cache
def _database_thread() -> ThreadPoolExecutor:
    """The database steps of a thread pool's worker calls: one thread, one kept connection, per process."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-worker-db")


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
