"""Celery tasks of mcp_app: thin wrappers that call a service or a command and return.

``purge_expired`` runs ``manage.py mcp_purge`` (expired sessions, tasks and SSE events); the reference
deployment schedules it with Celery beat every ``PURGE_INTERVAL_SECONDS`` (``mcp_host/celery.py``). Where no
Celery runs, schedule the command with cron instead. The worker calls' tasks (``mcp_app.workers.tasks``) are
registered here too: ``run_tool_call`` and the reaper ``reap_worker_calls`` (every ``REAP_INTERVAL_SECONDS``).
"""

from __future__ import annotations

from celery import shared_task
from django.core.management import call_command

# Registers the worker-call tasks (run_tool_call, reap_worker_calls) with whichever app autodiscovers this module.
from .workers.tasks import REAP_INTERVAL_SECONDS, REAP_TASK, reap_worker_calls, run_tool_call  # noqa: F401

PURGE_TASK = "mcp_app.purge_expired"
PURGE_INTERVAL_SECONDS = 3600.0


@shared_task(name=PURGE_TASK, ignore_result=True)
def purge_expired() -> None:
    call_command("mcp_purge")
