"""The worker path's liveness: no worker call waits silently for a worker that is gone or never came.

- ``check(record, redispatch)``: the awaiting runner's verdict on its unsettled record. A call ``queued`` past
  ``WORKER_QUEUE_TIMEOUT_SECONDS`` is sent again once (``resend``: workers do consume its queue) or failed
  (``expire``); a ``working`` call whose owner stopped beating is re-queued or failed per ``WORKER_LOST_CALLS``
  (``recover``). Returns whether the record moved.
- ``read_unwritten(record, redispatch)``: the same judgement for a call dispatched without its record, by the
  awaiting process's own clock (nobody else knows of it): the row a worker wrote; past
  ``WORKER_QUEUE_TIMEOUT_SECONDS`` sent again once as ``resend`` would, then a ``failed`` tombstone, so that a
  late delivery does not run the tool.
- ``sweep()``: the same for every worker call, awaited or not (``SWEEP_GRACE_SECONDS`` later), and
  ``runtime.durable.recover_orphaned_tasks``; ``start_sweeping()`` runs it every ``LIVENESS_SWEEP_SECONDS`` on
  this serving process's heartbeat thread.

Every verdict is one conditional UPDATE: the awaiting process, every sweep and a worker that comes back race
safely. Design: docs/workers.md ("liveness"). Not owned here: the heartbeat (``mcp_app.heartbeat``), the
deadline reaper (``running.reaper``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from ... import heartbeat
from ...conf import mcp_settings
from ...database import log_failure
from ...models import ToolTask
from ...protocol import versions
from ...protocol.errors import InternalError
from ...runtime import durable
from .. import records
from ..message import WorkerMessage
from ..running.reaper import fail
from .dispatch import broker_configured, send

logger = logging.getLogger("mcp_app.workers")

# How much longer than the heartbeat timeout the sweep leaves a lost call to the process awaiting it.
SWEEP_GRACE_SECONDS = 10.0


def no_worker_message() -> str:
    seconds = float(mcp_settings.WORKER_QUEUE_TIMEOUT_SECONDS)
    return f"No worker took this call within {seconds:g} s (no worker is running for its queue); retry later."


def check(record: ToolTask, redispatch: Callable[[ToolTask], Any] | None) -> bool:
    """The awaiting process's verdict on its unsettled record; whether it moved (then read it again)."""
    if record.execution != records.WORKER:
        return False
    if record.status == ToolTask.Status.QUEUED:
        return _overdue_in_queue(record) and (resend(record, redispatch) or expire(record))
    if record.status == ToolTask.Status.WORKING and record.owner:
        try:
            lost = record.owner in heartbeat.dead([record.owner])
        except Exception as error:  # the heartbeat backend is unreachable: judge nobody
            logger.warning("could not judge a worker's heartbeat: %s: %s", type(error).__name__, error)
            return False
        return lost and recover(record, redispatch)
    return False


def read_unwritten(record: ToolTask, redispatch: Callable[[ToolTask], Any] | None = None) -> ToolTask:
    """The record of a call dispatched unwritten (``dispatch.dispatch_unwritten``) as it is now: the row of its
    task id (the worker's, or a tombstone); while there is none, ``record`` itself (``queued``). Once it is
    overdue in the queue it is sent again once under a new Celery id when workers consume the queue (``record``
    changed so: whichever message a worker takes first writes the row, the other is superseded), else failed: the
    ``failed`` tombstone written now (a worker that wrote its row first wins)."""
    found = ToolTask.objects.by_task_id(record.task_id)
    if found is not None or not _overdue_in_queue(record):
        return found or record
    if redispatch is not None and record.status_message != RESENT_MESSAGE and _workers_consume():
        record.celery_id, record.updated_at, record.status_message = str(uuid.uuid4()), timezone.now(), RESENT_MESSAGE
        logger.warning(
            "worker call %s of %s sent again: no worker took it in time", record.task_id[:8], record.tool_name
        )
        redispatch(record)
        return record
    if ToolTask.objects.tombstone(record, durable.columns(InternalError(no_worker_message()))):
        logger.warning("worker call %s of %s failed: no worker took it", record.task_id[:8], record.tool_name)
    return ToolTask.objects.by_task_id(record.task_id) or record


def _overdue_in_queue(record: ToolTask) -> bool:
    queued_since = record.updated_at or record.created_at
    return queued_since < timezone.now() - timedelta(seconds=float(mcp_settings.WORKER_QUEUE_TIMEOUT_SECONDS))


RESENT_MESSAGE = "Sent again: no worker took it in time"


def resend(record: ToolTask, redispatch: Callable[[ToolTask], Any] | None) -> bool:
    """A call no worker took in time although workers consume its queue: its message was most likely taken by a
    worker that died before starting it (kombu's Redis transport restores such a message only after its
    visibility timeout). Sent again once under a new Celery id (the old message, if it ever comes, is
    superseded); whether it was."""
    if redispatch is None or record.status_message == RESENT_MESSAGE or not _workers_consume():
        return False
    where = {"status": ToolTask.Status.QUEUED, "celery_id": record.celery_id}
    return _send_again(
        record, redispatch, "sent again: no worker took it in time", where, status_message=RESENT_MESSAGE
    )


def _workers_consume() -> bool:
    """Whether workers consume the queue of worker calls (their heartbeats; unreachable: no)."""
    try:
        queue = heartbeat.worker_queue()
        return queue is not None and bool(heartbeat.consumers(queue))
    except Exception:  # the heartbeat backend is unreachable: fail it as no worker took it
        return False


def expire(record: ToolTask) -> bool:
    """Fail a call still ``queued`` under the same dispatch: no worker took it in time."""
    failed = durable.columns(InternalError(no_worker_message()))
    where = {"status": ToolTask.Status.QUEUED, "celery_id": record.celery_id}
    return fail(record, failed, "failed: no worker took it", where)


def recover(record: ToolTask, redispatch: Callable[[ToolTask], Any] | None) -> bool:
    """A call whose worker is gone: queued again and re-sent, or failed, per ``WORKER_LOST_CALLS``."""
    where = {"status": ToolTask.Status.WORKING, "owner": record.owner, "celery_id": record.celery_id}
    runs_left = record.attempts < int(mcp_settings.WORKER_CALL_MAX_ATTEMPTS)
    if mcp_settings.WORKER_LOST_CALLS == "requeue" and runs_left and redispatch is not None:
        why = f"re-queued: its worker {record.owner} is gone"
        return _send_again(record, redispatch, why, where, status=ToolTask.Status.QUEUED, owner="")
    return fail(record, records.lost(), f"failed: its worker {record.owner} is gone", where)


def _send_again(
    record: ToolTask, redispatch: Callable[[ToolTask], Any], why: str, where: dict[str, Any], **changes: Any
) -> bool:
    """Move ``record`` (if it is still ``where`` it was) under a new Celery id and send it again; whether it moved."""
    if not ToolTask.objects.transition(record.pk, where=where, celery_id=str(uuid.uuid4()), **changes):
        return False
    logger.warning("worker call %s of %s %s", record.task_id[:8], record.tool_name, why)
    requeued = ToolTask.objects.filter(pk=record.pk).first()
    if requeued is not None:
        redispatch(requeued)
    return True


def _sweep_redispatch(record: ToolTask) -> None:
    """Re-send a lost call nobody re-sent: the call is loaded by the worker (the message names no call), its
    notifications and server-to-client requests are not carried (its awaiting process, if any, is gone too)."""
    send(record, WorkerMessage(era=versions.era_of(record.protocol_version), in_task=record.client_task), None)


def sweep() -> dict[str, int]:
    """Recover what dead processes left: orphaned in-process tasks, and (with a broker) worker calls that no
    worker took in time or whose worker is gone. Counts by kind; never raises."""
    from ...runtime.durable import recover_orphaned_tasks

    counts = {"orphaned tasks": recover_orphaned_tasks(quiet=True), "unclaimed calls": 0, "lost calls": 0}
    if not broker_configured():
        return counts
    try:
        oldest = timezone.now() - timedelta(seconds=float(mcp_settings.WORKER_QUEUE_TIMEOUT_SECONDS))
        unclaimed = ToolTask.objects.filter(
            execution=records.WORKER, status=ToolTask.Status.QUEUED, updated_at__lt=oldest
        )
        counts["unclaimed calls"] = sum(resend(record, _sweep_redispatch) or expire(record) for record in unclaimed)
        working = list(
            ToolTask.objects.filter(execution=records.WORKER, status=ToolTask.Status.WORKING).exclude(owner="")
        )
        if working:
            grace = float(mcp_settings.HEARTBEAT_TIMEOUT_SECONDS) + SWEEP_GRACE_SECONDS
            gone = heartbeat.dead({record.owner for record in working}, timeout=grace, pid_check=False)
            counts["lost calls"] = sum(recover(record, _sweep_redispatch) for record in working if record.owner in gone)
    except Exception:
        log_failure(logger, "the sweep of worker calls failed")
    return counts


def _sweep_in_thread() -> None:
    close_old_connections()
    try:
        sweep()
    finally:
        close_old_connections()


def start_sweeping() -> None:
    """Run ``sweep`` every ``LIVENESS_SWEEP_SECONDS`` in this (serving) process, which beats from now on."""
    heartbeat.every(float(mcp_settings.LIVENESS_SWEEP_SECONDS), _sweep_in_thread)
