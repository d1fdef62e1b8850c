"""The reaper of worker calls: fail the calls past their deadline, purge expired records.

Run by Celery beat (``mcp_app.reap_worker_calls`` every 30 s, see ``workers.tasks``) and by ``mcp_purge``. A call
past its deadline that is still ``queued`` or ``working`` (its worker is stuck or gone, or no worker ever took
it) is failed with -32001, its awaiting processes are told (``done``), its worker is told to stop, and its quota
slot is given back.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone

from ..models import ToolTask
from ..protocol.errors import RequestTimeout
from . import quotas
from .execute import Relay, tell_worker
from .records import WORKER, store

DEADLINE_MESSAGE = "The call did not finish before its deadline"


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
        task_id for pk, task_id in overdue.values_list("pk", "task_id") if store(pk, RequestTimeout(DEADLINE_MESSAGE))
    ]
    if failed:
        for task_id in failed:
            quotas.release_call(task_id)
            async_to_sync(Relay(task_id).publish)({"kind": "done"})
            async_to_sync(tell_worker)(task_id)
    return len(failed)


def reap(now: Any = None) -> dict[str, int]:
    """The reaper: fail worker calls past their deadline, delete expired records. Counts by kind."""
    failed = fail_overdue(now)
    return {"worker calls past their deadline": failed, "expired tasks": ToolTask.objects.delete_expired()}
