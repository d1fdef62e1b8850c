"""Decisions on approvals as the runtime hears them (docs/approvals.md): ``decision(pk)``, the one wait of a call
for its approval's decision (woken by ``Decided`` on the approval's group, ``events.approval_group``, and re-reading
the approval on its own schedule, so a lost event only delays it); ``announce_decision``, the ``on_decision``
listener that writes the decision to the audit log and wakes the waiting call in whichever process holds it; and
``expire_approvals``, the sweep that marks approvals past their expiry and ends their parked calls, run by the
maintenance purger ``purge_approvals`` (``mcp_purge``), which also applies the audit retention to them.
Not here: the gate of ``tools/call`` (``runtime.approvals``), who may decide (``Approval.objects.decide``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from datetime import datetime
from typing import Any, ClassVar

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.utils import timezone

from ..channel_layer import LAYER_ERRORS, Subscription, local_bus, messaging
from ..conf import mcp_settings
from ..events import APPROVAL_EVENT, Event, approval_group
from ..models import ToolTask
from ..models.approvals import Approval, on_decision
from ..protocol import versions
from ..protocol.messages import failed_call
from . import durable

logger = logging.getLogger("mcp_app.runtime.approvals")
audit = logging.getLogger("mcp_app.audit")

# While a call waits for a decision it re-reads the approval this often at first, then less often (a lost event
# only delays it); the parked work of a task waits up to the approval's expiry.
RECHECK_FIRST_SECONDS = 0.5
RECHECK_MOST_SECONDS = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class Decided(Event):
    """An approval was approved or denied: the call waiting for it re-reads it."""

    KIND: ClassVar[str] = APPROVAL_EVENT


async def reload(pk: int) -> Approval:
    """Approval ``pk`` as it is now, with its approver and parked record."""
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
        approval = await reload(pk)
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
            approval = await reload(pk)
        return approval
    finally:
        if subscription is not None:
            await subscription.close()


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


def expire_approvals(now: datetime | None = None) -> int:
    """Approvals past their expiry become ``expired`` and their parked records end with the error result (each
    era's way), their waiting work stopped wherever it runs; returns how many expired."""
    count, parked = Approval.objects.expire_due(now)
    for task in parked:
        text = f"The approval request of tool {task.tool_name} expired before it was approved"
        handshake = task.protocol_version in versions.HANDSHAKE_VERSIONS
        columns = durable.columns(failed_call(text), handshake=handshake, tool_name=task.tool_name)
        if ToolTask.objects.transition(task.pk, where={"status": ToolTask.Status.PARKED}, **columns):
            async_to_sync(durable.stop)(task)
    return count


def purge_approvals(now: datetime, dry_run: bool) -> int:
    """The maintenance purger (``maintenance.register_purger``: ``mcp_purge``, hourly under Celery beat): expire
    what is due (``expire_approvals``; not in a dry run, which must change nothing, not even elsewhere), then
    delete the ended approvals (denied, expired, used) requested more than ``AUDIT_RETENTION_DAYS`` ago, as the
    audit log's own rows go. Returns how many were deleted."""
    if not dry_run:
        expire_approvals(now)
    return Approval.objects.delete_ended(mcp_settings.AUDIT_RETENTION_DAYS, now=now)
