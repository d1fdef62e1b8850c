"""The reaper of worker calls, and the one way a call is failed from outside its run.

- ``fail(record, columns, why, where)``: settle ``record`` with ``columns`` if it still matches ``where``, give its
  quota slot back and tell its awaiting processes (``done``); whether it moved. Liveness, the reaper and the
  worker (a lost pool process's call) fail calls with it.
- ``reap`` (Celery beat's ``mcp_app.reap_worker_calls`` every 30 s, and ``mcp_purge``): calls past their deadline
  still ``queued`` or ``working`` failed (-32001, ``fail_overdue``) and their workers told to stop
  (``durable.stop``, which also revokes the Celery message); expired records deleted.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone

from ...limits import quotas
from ...models import ToolTask
from ...models.tasks import WORKER
from ...protocol.errors import RequestTimeout
from ...runtime import durable
from ..message import Done
from .relay import Relay

logger = logging.getLogger("mcp_app.workers")

DEADLINE_MESSAGE = "The call did not finish before its deadline"
# What ``fail`` and ``durable.stop`` read of a record.
STOP_FIELDS = ("pk", "task_id", "tool_name", "execution", "celery_id")


def fail(record: ToolTask, columns: dict[str, Any], why: str, where: dict[str, Any] | None = None) -> bool:
    """Store ``columns`` (if the record is still ``where`` it was), tell every awaiting process, give the call's
    quota slot back; whether it moved."""
    if not ToolTask.objects.store(record.pk, columns, where=where):
        return False
    logger.warning("worker call %s of %s %s", record.task_id[:8], record.tool_name, why)
    quotas.release_call(record.task_id)
    try:
        async_to_sync(Relay(record.task_id).publish)(Done())
    except Exception as error:  # the awaiting processes read the record on their back-off anyway
        logger.warning("could not announce worker call %s: %s", record.task_id[:8], type(error).__name__)
    return True


def fail_overdue(now: Any = None, *, dry_run: bool = False) -> int:
    """Fail the worker calls past their deadline that are still ``queued`` or ``working`` (their worker is
    stuck or gone, or no worker ever took them); returns how many."""
    now = now or timezone.now()
    overdue = ToolTask.objects.filter(
        execution=WORKER, status__in=(ToolTask.Status.QUEUED, ToolTask.Status.WORKING), deadline__lt=now
    )
    if dry_run:
        return overdue.count()
    timed_out = durable.columns(RequestTimeout(DEADLINE_MESSAGE))
    failed = [record for record in overdue.only(*STOP_FIELDS) if fail(record, timed_out, "failed: past its deadline")]
    for record in failed:
        async_to_sync(durable.stop)(record)
    return len(failed)


def reap(now: Any = None) -> dict[str, int]:
    """The reaper: fail worker calls past their deadline, delete expired records. Counts by kind."""
    failed = fail_overdue(now)
    return {"worker calls past their deadline": failed, "expired tasks": ToolTask.objects.delete_expired()}
