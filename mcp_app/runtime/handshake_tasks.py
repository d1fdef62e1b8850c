"""Durable tasks of the 2025-11-25 experimental tasks (the handshake era), on the 2026-07-28 extension's record.

``HandshakeTaskService`` is the ``HandshakeTasks`` port of one request: ``start`` stores the task, runs the call in
the background and answers ``{task}`` at once; ``get``/``list``/``result``/``cancel`` see the caller's own
unexpired tasks (the session's side: ``task_session``). The rules: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
from django.db.models import QuerySet
from django.utils import timezone

from ..conf import mcp_settings
from ..events import task_group
from ..heartbeat import owner as owner_id
from ..models import ToolTask
from ..models.tasks import TERMINAL
from ..protocol import handshake_tasks as wire
from ..protocol import versions
from ..protocol.context import CallContext, RequestContext
from ..protocol.descriptors import ToolDescriptor
from ..protocol.errors import InternalError, InvalidParams, ProtocolError
from ..protocol.ports import NO_CHANNEL
from ..protocol.reporters import LogReporter
from . import durable, task_session
from .progress import RecordedProgress
from .task_session import SessionChannel, StatusWatch, TaskOutbound, announce, group_send, task_state
from .tasks import CallerTasks

# What a task's work awaits before its call runs: ``gate(record, run)`` (see ``HandshakeTaskService.start``).
Gate = Callable[[ToolTask, Callable[[], Awaitable[dict[str, Any]]]], Awaitable[dict[str, Any]]]

# A granted ttl is never shorter than this: a task must outlive the client's first few polls.
MIN_TTL_MS = 1_000


def granted_ttl(requested: int | None) -> int:
    """The ``ttl`` a task gets: the requested one within [``MIN_TTL_MS``, ``TASK_TTL_MS``], else the setting."""
    ceiling = int(mcp_settings.TASK_TTL_MS)
    if requested is None:
        return ceiling
    return max(min(requested, ceiling), min(MIN_TTL_MS, ceiling))


def _withheld_tools(ctx: RequestContext) -> set[str]:
    """Tools the server has but this token's grant leaves out: their tasks are as unknown as they are."""
    whole = ctx.catalog.unrestricted
    if whole is None:
        return set()
    return {tool.name for tool in whole.tools} - {tool.name for tool in ctx.catalog.tools}


class HandshakeTaskService(CallerTasks):
    """The ``HandshakeTasks`` port for one handshake-era request: the caller's 2025-11-25 tasks on one server."""

    def __init__(self, server_pk: int, agent_pk: int, session_key: str | None) -> None:
        super().__init__(server_pk, agent_pk)
        self._session_key = session_key

    def _visible(self, ctx: RequestContext) -> QuerySet[ToolTask]:
        tasks = ToolTask.objects.filter(
            server_id=self._server_pk,
            agent_id=self._agent_pk,
            client_task=True,
            protocol_version__in=versions.HANDSHAKE_VERSIONS,
            expires_at__gt=timezone.now(),
        )
        withheld = _withheld_tools(ctx)
        return tasks.exclude(tool_name__in=withheld) if withheld else tasks

    async def _find(self, ctx: RequestContext, task_id: str) -> ToolTask | None:
        task: ToolTask | None = await database_sync_to_async(
            lambda: self._visible(ctx).filter(task_id=task_id).first()
        )()
        return task

    async def start(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        call: CallContext,
        *,
        ttl_ms: int | None,
        request_id: str | int,
        gate: Gate | None = None,
        granted_ttl_ms: int | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """``gate``: the call waits for ``gate(record, run)`` first, which awaits ``run()`` or returns another
        outcome (a call parked for approval, ``runtime.approvals``); ``granted_ttl_ms``: the ttl it gets instead of
        the one asked for; ``fields``: the record's other columns."""
        ctx = call.request
        task = await self.create(
            tool,
            arguments,
            call,
            **{
                "ttl_ms": granted_ttl_ms or granted_ttl(ttl_ms),
                "status": ToolTask.Status.WORKING,
                "owner": owner_id(),
                "execution": tool.execution,
                "protocol_version": ctx.protocol_version,
                "request_id": str(request_id)[:200],
                "started_at": timezone.now(),
                **fields,
            },
        )
        channel = SessionChannel(self._session_key, task.task_id)
        # The request that created the task is answered now: the call reports to the session's streams instead.
        request = dataclasses.replace(
            ctx,
            emit=channel.emit,
            outbound=TaskOutbound(self._session_key, task, channel) if self._session_key is not None else NO_CHANNEL,
        )
        task_call = CallContext(
            request=request,
            progress=RecordedProgress(call.progress.token, channel.emit, task.pk),
            log=LogReporter(call.log.threshold, channel.emit),
            in_task=True,
        )

        def run() -> Awaitable[dict[str, Any]]:
            return ctx.runner.call_tool(tool, arguments, task_call)

        work = asyncio.ensure_future(gate(task, run) if gate is not None else run())
        # Settled by this era's columns, and its session told of each change.
        columns = functools.partial(durable.columns, handshake=True, tool_name=task.tool_name)
        durable.follow(task, work, columns=columns, announce=functools.partial(announce, task.pk, channel))
        return wire.create_task_result(task_state(task))

    async def get(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        task = await self._find(ctx, task_id)
        return wire.task(task_state(task)) if task is not None else None

    async def result(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        task = await self._find(ctx, task_id)
        if task is not None and task.status not in TERMINAL:
            find = functools.partial(self._find, ctx, task_id)
            async with StatusWatch(task_id) as watch:  # listening first: a change after the next read is heard
                task = await durable.until_settled(
                    await find(),
                    watch.events,
                    read=find,
                    every=task_session.RESULT_RECHECK_SECONDS,
                    done=durable.terminal,
                )
        if task is None:
            return None
        if task.result is not None:
            return wire.with_related_task(task.result, task_id)
        if task.status == ToolTask.Status.CANCELLED:
            raise ProtocolError("Task was cancelled", {"taskId": task_id, "status": "cancelled"})
        error = task.error if isinstance(task.error, dict) else InternalError().to_wire()
        raise ProtocolError(str(error.get("message") or "Internal error"), error.get("data"), code=error.get("code"))

    async def list(self, ctx: RequestContext, cursor: Any) -> dict[str, Any]:
        after = wire.decode_cursor(cursor)
        size = max(1, int(ctx.page_size))

        def page() -> list[ToolTask]:
            tasks = self._visible(ctx)
            if after is not None:
                tasks = tasks.filter(pk__lt=after)
            return list(tasks.order_by("-pk")[: size + 1])

        found = await database_sync_to_async(page)()
        result: dict[str, Any] = {"tasks": [wire.task(task_state(task)) for task in found[:size]]}
        if len(found) > size:
            result["nextCursor"] = wire.encode_cursor(found[size - 1].pk)
        return result

    async def cancel(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        task = await self._find(ctx, task_id)
        if task is None:
            return None
        moved = task.status not in TERMINAL and await durable.cancel(task, "The task was cancelled by request.")
        current = await database_sync_to_async(ToolTask.objects.load)(task.pk) or task
        if not moved:
            raise InvalidParams(
                f"Cannot cancel task: already in terminal status '{current.status}'",
                {"taskId": task_id, "status": current.status},
            )
        await group_send(task_group(task_id), durable.StatusChanged().to_wire())
        return wire.task(task_state(current))
