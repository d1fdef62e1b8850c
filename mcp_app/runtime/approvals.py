"""Calls that wait for a person's approval (docs/approvals.md): the ``Approvals`` port (``ApprovalGate``), the wait
of a call for its decision, how a decision wakes it, and the sweep that expires approvals.

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

A decision (``Approval.objects.decide``, in any process) is published as ``Decided`` on the approval's group
(``events.approval_group``); the waiting call also re-reads the approval on its own schedule, so a lost event only
delays it. Not here: who may decide (the model), a durable record's lifecycle (``durable``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, ClassVar

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.utils import timezone

from ..channel_layer import LAYER_ERRORS, Subscription, local_bus, messaging
from ..conf import mcp_settings
from ..events import APPROVAL_EVENT, Event, approval_group
from ..heartbeat import owner as owner_id
from ..models import ToolTask
from ..models.approvals import Approval, on_decision
from ..models.tasks import TERMINAL
from ..protocol import modern, versions
from ..protocol.canonical import json_digest
from ..protocol.context import CallContext, RequestContext
from ..protocol.descriptors import ToolDescriptor
from ..protocol.errors import ApprovalPending, InvalidParams, InvalidRequest
from ..protocol.messages import failed_call
from ..protocol.reporters import LogReporter, ProgressReporter, discard
from . import durable
from .execution import validate_arguments
from .handshake_tasks import HandshakeTaskService
from .tasks import TaskService, create_result, iso

logger = logging.getLogger("mcp_app.runtime.approvals")
audit = logging.getLogger("mcp_app.audit")

# While a call waits for a decision it re-reads the approval this often at first, then less often (a lost event
# only delays it); the parked work of a task waits up to the approval's expiry.
RECHECK_FIRST_SECONDS = 0.5
RECHECK_MOST_SECONDS = 30.0
# A record parked for approval lives this much past the approval's expiry, for its outcome to be read.
MAX_TTL_MS = 2**31 - 1

Run = Callable[[], Awaitable[dict[str, Any]]]


@dataclasses.dataclass(frozen=True, slots=True)
class Decided(Event):
    """An approval was approved or denied: the call waiting for it re-reads it."""

    KIND: ClassVar[str] = APPROVAL_EVENT


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


async def _load(pk: int) -> Approval:
    approval: Approval = await database_sync_to_async(
        lambda: Approval.objects.select_related("decided_by", "task").get(pk=pk)
    )()
    return approval


async def decision(pk: int, *, within: float | None = None) -> Approval:
    """Approval ``pk`` once it is decided or expired, or as it is after ``within`` seconds (``None``: up to its
    expiry). Woken by ``Decided`` on its group; re-read at least every ``RECHECK_MOST_SECONDS``."""
    heard: asyncio.Queue[bool] = asyncio.Queue()

    def on_message(message: dict[str, Any]) -> bool:
        if Decided.from_wire(message) is None:
            return False
        if heard.empty():  # one queued wake-up stands for all until the approval is read again
            heard.put_nowait(True)
        return True

    subscription: Subscription | None = None
    try:  # listening first: a decision after the next read is heard
        subscription = await messaging().subscribe(approval_group(pk), on_message=on_message)
    except LAYER_ERRORS as error:
        logger.info("approval %s is awaited without decision events: %s", pk, type(error).__name__)
    try:
        approval = await _load(pk)
        loop = asyncio.get_running_loop()
        until = (approval.expires_at - timezone.now()).total_seconds() if within is None else within
        deadline = loop.time() + max(0.0, until)
        delay = RECHECK_FIRST_SECONDS
        while approval.status == Approval.Status.PENDING and not approval.is_expired:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(heard.get(), min(delay, remaining))
            except TimeoutError:
                delay = min(delay * 2, RECHECK_MOST_SECONDS)
            approval = await _load(pk)
        return approval
    finally:
        if subscription is not None:
            await subscription.close()


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
        if approval.status == Approval.Status.APPROVED and await database_sync_to_async(Approval.objects.use)(
            approval.pk
        ):
            _ran_under(approval, tool.name)
            return await run()
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
            return self._wire(ctx, parked, handshake_task)
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

    @staticmethod
    def _wire(ctx: RequestContext, task: ToolTask, handshake_task: bool) -> dict[str, Any]:
        if handshake_task:
            from ..protocol import handshake_tasks as wire
            from .task_session import task_state

            return wire.create_task_result(task_state(task))
        return create_result(task)


async def after_decision(approval_pk: int, task: ToolTask, tool: str, run: Run) -> dict[str, Any]:
    """The work of a parked record: wait for the decision (up to the approval's expiry); approved, use the
    approval up, move the record to ``working`` and ``run()``; else end with the error result saying why."""
    approval = await decision(approval_pk)
    if approval.status != Approval.Status.APPROVED or not await database_sync_to_async(Approval.objects.use)(
        approval_pk
    ):
        if approval.status == Approval.Status.APPROVED:
            approval.status = Approval.Status.USED  # another call used it first
        return _ended(approval)
    _ran_under(approval, tool, task.task_id)
    moved = await database_sync_to_async(ToolTask.objects.transition)(
        task.pk,
        where={"status": ToolTask.Status.PARKED},
        status=ToolTask.Status.WORKING,
        status_message="",
        started_at=timezone.now(),
        owner=owner_id(),
    )
    if not moved:  # cancelled meanwhile: the record keeps its end
        raise asyncio.CancelledError
    return await run()


async def _publish(approval_pk: int) -> None:
    event = Decided().to_wire()
    bus = messaging()
    with contextlib.suppress(*LAYER_ERRORS):  # best effort: the waiting call re-reads the approval anyway
        await bus.group_send(approval_group(approval_pk), event)
    if bus is not local_bus:
        await local_bus.group_send(approval_group(approval_pk), event)


@on_decision
def announce_decision(approval: Approval) -> None:
    """After a decision commits: the audit log says who decided what, and the waiting call is woken."""
    approver = getattr(approval.decided_by, "username", None) or "?"
    audit.info(
        "approval %s of tool %s for agent #%s %s by %s%s",
        approval.pk,
        approval.tool_name,
        approval.agent_id,
        approval.status,
        approver,
        f": {approval.note}" if approval.note else "",
        extra={"approval": approval.pk, "decision": approval.status, "decided_by": approver, "note": approval.note},
    )
    try:
        async_to_sync(_publish)(approval.pk)
    except RuntimeError as error:  # called on an event loop's thread: wake it from there
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            logger.warning("could not announce the decision of approval %s: %s", approval.pk, error)
            return
        durable.keep(loop.create_task(_publish(approval.pk)))


def expire_approvals(now: datetime, dry_run: bool) -> int:
    """The maintenance sweep (``maintenance.register_purger``): approvals past their expiry become ``expired``
    and their parked records end with the error result (each era's way); returns how many expired."""
    count, parked = Approval.objects.expire_due(now)
    for task in parked:
        text = f"The approval request of tool {task.tool_name} expired before it was approved"
        handshake = task.protocol_version in versions.HANDSHAKE_VERSIONS
        columns = durable.columns(failed_call(text), handshake=handshake, tool_name=task.tool_name)
        ToolTask.objects.transition(task.pk, **columns)
    return count


GATE = ApprovalGate()
