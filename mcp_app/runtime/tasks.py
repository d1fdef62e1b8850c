"""Durable tasks of the 2026-07-28 tasks extension: when a ``tools/call`` becomes a task, and running it.

``answer_or_task`` decides for the inline and the routing runner alike whether a call answers at once or becomes
a task; ``call_maybe_as_task`` runs one in this process; ``TaskService`` is the ``Tasks`` port of one request.
The rules: docs/architecture.md ("Tasks in both eras"). Not owned here: the record's lifecycle
(``runtime.durable``); the runners (this module knows only the ``ToolRunner`` port).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from channels.db import database_sync_to_async

from ..conf import mcp_settings
from ..heartbeat import owner as owner_id
from ..models import ToolTask
from ..protocol.context import CallContext, RequestContext, ToolRunner
from ..protocol.descriptors import ToolDescriptor
from ..protocol.errors import INVALID_PARAMS, CapacityExceeded, ProtocolError
from ..protocol.reporters import LogReporter, ProgressReporter, discard
from . import durable
from .mrtr import PARK


def iso(moment: Any) -> str:
    """A timestamp as the task wire forms write it (UTC, ``Z``)."""
    return str(moment.isoformat()).replace("+00:00", "Z")


def wire_status(status: str) -> str:
    """A record's status as both task protocols know it: a worker call not started yet ("queued") and a call
    waiting for approval ("parked") are ``working`` (its ``statusMessage`` says which approval)."""
    return ToolTask.Status.WORKING if status in (ToolTask.Status.QUEUED, ToolTask.Status.PARKED) else status


def task_wire(task: ToolTask, *, detailed: bool) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "taskId": task.task_id,
        "status": wire_status(task.status),
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": mcp_settings.TASK_POLL_INTERVAL_MS,
    }
    if task.status_message:
        wire["statusMessage"] = task.status_message
    if detailed:
        if task.status == ToolTask.Status.INPUT_REQUIRED and task.input_requests:
            wire["inputRequests"] = task.input_requests
        elif task.status == ToolTask.Status.COMPLETED and task.result is not None:
            wire["result"] = task.result
        elif task.status == ToolTask.Status.FAILED and task.error is not None:
            wire["error"] = task.error
    return wire


class CallerTasks:
    """What the task services of both eras share: the caller (an agent on one server), whose records they make."""

    available = True

    def __init__(self, server_pk: int, agent_pk: int) -> None:
        self._server_pk = server_pk
        self._agent_pk = agent_pk

    async def create(
        self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext, **fields: Any
    ) -> ToolTask:
        """A new record of the caller's call of ``tool`` (``fields``: its state; ``ttl_ms`` by default the
        ``TASK_TTL_MS`` setting)."""
        task: ToolTask = await database_sync_to_async(ToolTask.objects.create_task)(
            server_id=self._server_pk,
            agent_id=self._agent_pk,
            tool_name=tool.name,
            arguments=arguments,
            client_capabilities=dict(call.request.client_capabilities),
            **{"ttl_ms": mcp_settings.TASK_TTL_MS, **fields},
        )
        return task


class TaskService(CallerTasks):
    """The ``Tasks`` port for one request: the caller's tasks on one server."""

    def __init__(self, server_pk: int, agent_pk: int, runner: ToolRunner) -> None:
        super().__init__(server_pk, agent_pk)
        self._runner = runner
        self._ctx: RequestContext | None = None

    def bind(self, ctx: RequestContext) -> None:
        self._ctx = ctx

    def _visible(self, task_id: str) -> ToolTask | None:
        task = ToolTask.objects.visible_to(task_id, server_id=self._server_pk, agent_id=self._agent_pk)
        if task is not None and self._ctx is not None and self._ctx.catalog.withholds_tool(task.tool_name):
            return None  # a task of a tool outside this token's grant is as unknown as the tool
        return task

    async def get(self, task_id: str) -> dict[str, Any] | None:
        task = await database_sync_to_async(self._visible)(task_id)
        return task_wire(task, detailed=True) if task is not None else None

    async def cancel(self, task_id: str) -> bool:
        task = await database_sync_to_async(self._visible)(task_id)
        if task is None:
            return False
        await durable.cancel(task, "Cancelled by the client")
        return True

    async def update(self, task_id: str, responses: Mapping[str, Any]) -> bool:
        task = await database_sync_to_async(self._visible)(task_id)
        if task is None:
            return False
        if task.status != ToolTask.Status.INPUT_REQUIRED:
            return True  # nothing outstanding: acknowledged, ignored
        outstanding = dict(task.input_requests or {})
        answers = {**(task.input_responses or {}), **{k: v for k, v in responses.items() if k in outstanding}}
        remaining = {key: request for key, request in outstanding.items() if key not in answers}
        if remaining:
            await database_sync_to_async(ToolTask.objects.transition)(
                task.pk, input_requests=remaining, input_responses=answers
            )
            return True
        moved = await database_sync_to_async(ToolTask.objects.transition)(
            task.pk,
            status=ToolTask.Status.WORKING,
            input_requests=None,
            input_responses=answers,
            status_message="",
            owner=owner_id(),  # the work resumes in this process
        )
        if moved:
            self._resume(task, answers)
        return True

    def _resume(self, task: ToolTask, answers: dict[str, Any]) -> None:
        assert self._ctx is not None
        tool = self._ctx.catalog.tool(task.tool_name)
        request = dataclasses.replace(self._ctx, emit=discard, client_capabilities=task.client_capabilities or {})
        call = CallContext(
            request=request,
            progress=ProgressReporter(None, discard),
            log=LogReporter(None, discard),
            input_responses=answers,
            request_state=task.request_state or None,
            in_task=True,
            task_id=task.task_id,  # a worker tool resumes as this record (one row)
        )
        if tool is None:
            work: asyncio.Task[Any] = asyncio.ensure_future(_gone(task.tool_name))
        else:
            work = asyncio.ensure_future(self._runner.call_tool(tool, dict(task.arguments), call))
        durable.follow(task, work, columns=durable.columns)


async def _gone(name: str) -> dict[str, Any]:
    raise ProtocolError(f"Tool {name} is no longer available", code=INVALID_PARAMS)


def create_result(task: ToolTask) -> dict[str, Any]:
    return {"resultType": "task", **task_wire(task, detailed=False)}


async def answer_or_task(
    tool: ToolDescriptor,
    call: CallContext,
    start: Callable[[CallContext], Awaitable[Awaitable[dict[str, Any]]]],
    *,
    settled: Callable[[ProtocolError | dict[str, Any]], Awaitable[ToolTask]],
    running: Callable[[], Awaitable[ToolTask]],
) -> dict[str, Any]:
    """Whether a task-capable call answers at once or becomes a task (docs/architecture.md): ``start`` starts the
    work with the call's task context (whose reports stop reaching the request once it is a task) and returns what
    to await; ``settled`` gives the task of work that finished within ``TASK_IMMEDIATE_SECONDS`` (a ``required``
    tool), ``running`` that of work still running, which it follows."""
    converted = False
    emit = call.request.emit

    async def gated(message: dict[str, Any]) -> None:
        # Once the call has become a task its request is answered: nothing more goes to that response.
        if not converted:
            await emit(message)

    task_call = dataclasses.replace(
        call,
        request=dataclasses.replace(call.request, emit=gated),
        progress=ProgressReporter(call.progress.token, gated),
        log=LogReporter(call.log.threshold, gated),
        in_task=True,
    )
    work = asyncio.ensure_future(await start(task_call))
    done, _pending = await asyncio.wait({work}, timeout=mcp_settings.TASK_IMMEDIATE_SECONDS)
    if work in done:
        error = work.exception()
        outcome: ProtocolError | dict[str, Any]
        if error is not None:
            if tool.task_support != "required" or not isinstance(error, ProtocolError):
                raise error
            outcome = error  # a required task that failed at once: settled failed
        else:
            result = work.result()
            if result.get("resultType") == "input_required" and not result.get(PARK):
                return result  # multi-round trips before task creation stay synchronous
            if tool.task_support == "optional":
                return result
            outcome = result
        return create_result(await settled(outcome))
    converted = True
    try:
        task = await running()
    except CapacityExceeded:
        work.cancel()  # over the inline-task cap of its agent or tenant: the call does not go on unseen
        raise
    durable.follow(task, work, columns=durable.columns)
    return create_result(task)


async def call_maybe_as_task(
    runner: ToolRunner, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext
) -> dict[str, Any]:
    """Run a task-capable call for a declaring client in this process (``answer_or_task``): its task is a new
    record."""
    service = call.request.tasks
    assert isinstance(service, TaskService)
    # What of the call the task's run gets: neither its request id, _meta nor record.
    base = dataclasses.replace(call, in_task=False, request_id=None, meta=None, task_id=None, cancelled=None)

    async def start(task_call: CallContext) -> Awaitable[dict[str, Any]]:
        return runner.call_tool(tool, arguments, task_call)

    async def settled(outcome: ProtocolError | dict[str, Any]) -> ToolTask:
        return await service.create(tool, arguments, call, **durable.columns(outcome))

    async def running() -> ToolTask:
        return await service.create(tool, arguments, call, status=ToolTask.Status.WORKING, owner=owner_id())

    return await answer_or_task(tool, base, start, settled=settled, running=running)
