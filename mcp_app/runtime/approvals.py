"""Calls that wait for a person's approval (docs/approvals.md): the ``Approvals`` port (``ApprovalGate``) and the
work of a parked call (``after_decision``).

The gate serves ``tools/call`` of a tool whose descriptor says ``requires_approval`` (decided once, when the catalog
is resolved), once its arguments are valid; rate limits and budgets admitted the request before. A call is bound to
its tenant, server, agent, tool and the canonical digest of its arguments (``protocol.canonical.json_digest``):

1. an approved, unused, unexpired approval of that binding is used up (one conditional UPDATE) and the call runs as
   any other does (inline, as a task, or on a worker);
2. else the binding's pending approval (or a new one) stands for it. A client that can take a task (2026-07-28
   declaring the tasks extension, or 2025-11-25 with ``params.task``) gets one at once, parked (``working`` on the
   wire, "Waiting for approval <id>"); its work, in this process, waits for the decision, then uses the approval
   and runs the call, or ends with an error result (denied, expired). Any other client waits up to
   ``APPROVAL_WAIT_SECONDS``, then runs, gets that error result, or ``ApprovalPending`` (-32014).

How a call waits for the decision, and how a decision made in any process wakes it: ``runtime.decisions``. Not
here: who may decide (the model), a durable record's lifecycle (``durable``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from ..conf import mcp_settings
from ..heartbeat import owner as owner_id
from ..models import ToolTask
from ..models.approvals import Approval
from ..models.tasks import TERMINAL
from ..protocol import handshake_tasks as wire
from ..protocol import modern, versions
from ..protocol.canonical import json_digest
from ..protocol.context import CallContext, RequestContext
from ..protocol.descriptors import ToolDescriptor
from ..protocol.errors import ApprovalPending, InvalidParams, InvalidRequest
from ..protocol.messages import failed_call
from ..protocol.reporters import LogReporter, ProgressReporter, discard
from . import durable
from .decisions import decision, reload
from .execution import validate_arguments
from .handshake_tasks import HandshakeTaskService
from .task_session import task_state
from .tasks import TaskService, create_result, iso

audit = logging.getLogger("mcp_app.audit")

# The longest ttl a record can hold (its column is a 32-bit integer): about 24.8 days.
MAX_TTL_MS = 2**31 - 1

Run = Callable[[], Awaitable[dict[str, Any]]]


def _binding(ctx: RequestContext, tool: ToolDescriptor, arguments: dict[str, Any]) -> dict[str, Any]:
    principal = ctx.principal
    if principal is None or principal.tenant_pk is None or principal.agent_pk is None or ctx.server.pk is None:
        raise InvalidRequest(f"Tool {tool.name} requires a tenant admin's approval, which cannot be asked for here")
    try:
        digest = json_digest(arguments)
    except ValueError as exc:
        raise InvalidParams(f"Invalid params: the arguments of {tool.name} are not canonical JSON: {exc}") from exc
    return {
        "tenant_id": principal.tenant_pk,
        "server_id": ctx.server.pk,
        "agent_id": principal.agent_pk,
        "tool_name": tool.name,
        "arguments_digest": digest,
    }


def _reason(tool: ToolDescriptor) -> str:
    if (tool.annotations or {}).get("destructiveHint") is True:
        return "The tool is destructive (destructiveHint) or set to require approval"
    return "The tool is set to require approval"


def _takes_modern_task(ctx: RequestContext) -> bool:
    return ctx.era == versions.MODERN and ctx.tasks.available and ctx.client_declares_extension(modern.TASKS_EXTENSION)


def _ran_under(approval: Approval, tool: str, task_id: str = "") -> None:
    approver = getattr(approval.decided_by, "username", None) or "?"
    audit.info(
        "call of tool %s by agent #%s ran under approval %s, approved by %s%s",
        tool,
        approval.agent_id,
        approval.pk,
        approver,
        f" (task {task_id[:8]}…)" if task_id else "",
        extra={"approval": approval.pk, "approved_by": approver, "task_id": task_id},
    )


def _ended(approval: Approval) -> dict[str, Any]:
    """The error result of a call whose approval was denied, expired or used by another call."""
    return failed_call(approval.ended_text)


def _parked_ttl_ms() -> int:
    """A parked record outlives its approval's expiry by ``TASK_TTL_MS``: its outcome stays readable."""
    return min(MAX_TTL_MS, int(float(mcp_settings.APPROVAL_TTL_SECONDS) * 1000) + int(mcp_settings.TASK_TTL_MS))


class ApprovalGate:
    """The ``Approvals`` port (stateless: one for every request; the caller comes from the call's context)."""

    async def call(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        call: CallContext,
        *,
        handshake_task: bool,
        ttl_ms: int | None,
        request_id: str | int,
    ) -> dict[str, Any]:
        validate_arguments(tool, arguments)  # invalid arguments are refused before anyone is asked
        ctx = call.request
        binding = _binding(ctx, tool, arguments)

        async def run() -> dict[str, Any]:
            if handshake_task:
                return await ctx.handshake_tasks.start(tool, arguments, call, ttl_ms=ttl_ms, request_id=request_id)
            return await ctx.runner.call_tool(tool, arguments, call)

        used = await database_sync_to_async(Approval.objects.use_approved)(**binding)
        if used is not None:
            _ran_under(used, tool.name)
            return await run()
        approval: Approval = await database_sync_to_async(Approval.objects.request)(
            tool_ref=tool.ref, arguments=arguments, reason=_reason(tool), **binding
        )
        if handshake_task or _takes_modern_task(ctx):
            return await self._park(approval, tool, arguments, call, handshake_task, ttl_ms, request_id)
        approval = await decision(approval.pk, within=float(mcp_settings.APPROVAL_WAIT_SECONDS))
        if approval.status == Approval.Status.APPROVED:
            if await database_sync_to_async(Approval.objects.use)(approval.pk):
                _ran_under(approval, tool.name)
                return await run()
            approval = await reload(approval.pk)  # expired just now, or used by another call first
        if approval.status == Approval.Status.PENDING and not approval.is_expired:
            task = approval.task
            raise ApprovalPending(
                tool.name,
                approval.pk,
                iso(approval.expires_at),
                task.task_id if task is not None and task.status not in TERMINAL else None,
            )
        return _ended(approval)

    async def _park(
        self,
        approval: Approval,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        call: CallContext,
        handshake_task: bool,
        ttl_ms: int | None,
        request_id: str | int,
    ) -> dict[str, Any]:
        """A task for the call at once, parked until the decision (or the binding's parked task, re-issued)."""
        ctx = call.request
        parked = approval.task
        if (
            parked is not None
            and parked.status == ToolTask.Status.PARKED
            and (parked.protocol_version in versions.HANDSHAKE_VERSIONS) == handshake_task
        ):
            return wire.create_task_result(task_state(parked)) if handshake_task else create_result(parked)
        message = f"Waiting for approval {approval.pk}"

        async def gate(task: ToolTask, run: Run) -> dict[str, Any]:
            return await after_decision(approval.pk, task, tool.name, run)

        if handshake_task:
            service = ctx.handshake_tasks
            assert isinstance(service, HandshakeTaskService)

            async def attach_then(task: ToolTask, run: Run) -> dict[str, Any]:
                await database_sync_to_async(Approval.objects.attach)(approval.pk, task)
                return await gate(task, run)

            # The record is stored parked before the client hears of it; the approval names it just after.
            return await service.start(
                tool,
                arguments,
                call,
                ttl_ms=ttl_ms,
                request_id=request_id,
                gate=attach_then,
                granted_ttl_ms=_parked_ttl_ms(),
                status=ToolTask.Status.PARKED,
                status_message=message,
                started_at=None,
            )
        tasks = ctx.tasks
        assert isinstance(tasks, TaskService)
        task = await tasks.create(
            tool,
            arguments,
            call,
            ttl_ms=_parked_ttl_ms(),
            status=ToolTask.Status.PARKED,
            status_message=message,
            owner=owner_id(),
            protocol_version=ctx.protocol_version,
        )
        await database_sync_to_async(Approval.objects.attach)(approval.pk, task)
        # What the call runs with once approved: the request is answered (nothing more reaches it); a worker tool
        # runs as this record (one row).
        task_call = CallContext(
            request=dataclasses.replace(ctx, emit=discard),
            progress=ProgressReporter(None, discard),
            log=LogReporter(None, discard),
            in_task=True,
            task_id=task.task_id,
        )
        work = asyncio.ensure_future(gate(task, lambda: ctx.runner.call_tool(tool, arguments, task_call)))
        durable.follow(task, work, columns=durable.columns)
        return create_result(task)


async def after_decision(approval_pk: int, task: ToolTask, tool: str, run: Run) -> dict[str, Any]:
    """The work of a parked record: wait for the decision (up to the approval's expiry); approved, move the record
    to ``working``, use the approval up and ``run()``; else end with the error result saying why."""
    approval = await decision(approval_pk)
    if approval.status != Approval.Status.APPROVED:
        return _ended(approval)
    moved = await database_sync_to_async(ToolTask.objects.transition)(
        task.pk,
        where={"status": ToolTask.Status.PARKED},
        status=ToolTask.Status.WORKING,
        status_message="",
        started_at=timezone.now(),
        owner=owner_id(),
    )
    if not moved:  # cancelled meanwhile: the record keeps its end, and the approval stays unused
        raise asyncio.CancelledError
    if not await database_sync_to_async(Approval.objects.use)(approval_pk):
        return _ended(await reload(approval_pk))  # expired just now, or used by a re-issued call first
    _ran_under(approval, tool, task.task_id)
    return await run()


GATE = ApprovalGate()
