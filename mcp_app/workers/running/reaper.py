"""The reaper of worker calls: fail the calls past their deadline, purge expired records.

Run by Celery beat (``mcp_app.reap_worker_calls`` every 30 s, see ``workers.tasks``) and by ``mcp_purge``. A call
past its deadline that is still ``queued`` or ``working`` (its worker is stuck or gone, or no worker ever took
it) is failed with -32001, its awaiting processes are told (``done``), its worker is told to stop
(``durable.stop``, which also revokes its Celery message), and its quota slot is given back.
"""

from __future__ import annotations

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

DEADLINE_MESSAGE = "The call did not finish before its deadline"
# What ``durable.stop`` reads of a record.
STOP_FIELDS = ("pk", "task_id", "execution", "celery_id")


def fail_overdue(now: Any = None, *, dry_run: bool = False) -> int:
    """Fail the worker calls past their deadline that are still ``queued`` or ``working`` (their worker is
    stuck or gone, or no worker ever took them); returns how many. Each is told to its awaiting processes."""
    now = now or timezone.now()
    overdue = ToolTask.objects.filter(
        execution=WORKER, status__in=(ToolTask.Status.QUEUED, ToolTask.Status.WORKING), deadline__lt=now
    )
    if dry_run:
        return overdue.count()
    failed = [
        record
        for record in overdue.only(*STOP_FIELDS)
        if ToolTask.objects.store(record.pk, durable.columns(RequestTimeout(DEADLINE_MESSAGE)))
    ]
    for record in failed:
        quotas.release_call(record.task_id)
        async_to_sync(Relay(record.task_id).publish)(Done())
        async_to_sync(durable.stop)(record)
    return len(failed)


def reap(now: Any = None) -> dict[str, int]:
    """The reaper: fail worker calls past their deadline, delete expired records. Counts by kind."""
    failed = fail_overdue(now)
    return {"worker calls past their deadline": failed, "expired tasks": ToolTask.objects.delete_expired()}
