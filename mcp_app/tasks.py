"""Celery tasks of mcp_app: thin wrappers that call a service or a command and return.

``purge_expired`` runs ``manage.py mcp_purge`` (beat, every ``PURGE_INTERVAL_SECONDS``: ``mcp_host/celery.py``;
without Celery, run the command from cron); ``sync_upstreams`` re-reads the upstream catalogs that are due. The
worker calls' tasks (``run_tool_call``, the reaper ``reap_worker_calls``) are registered here too.
"""

from __future__ import annotations

from celery import shared_task
from django.core.management import call_command

# Registers the worker-call tasks (run_tool_call, reap_worker_calls) with whichever app autodiscovers this module.
from .workers.running.tasks import REAP_INTERVAL_SECONDS, REAP_TASK, reap_worker_calls, run_tool_call  # noqa: F401

PURGE_TASK = "mcp_app.purge_expired"
PURGE_INTERVAL_SECONDS = 3600.0


@shared_task(name=PURGE_TASK, ignore_result=True)
def purge_expired() -> None:
    call_command("mcp_purge")


SYNC_UPSTREAMS_TASK = "mcp_app.sync_upstreams"
SYNC_UPSTREAMS_CHECK_SECONDS = 60.0


@shared_task(name=SYNC_UPSTREAMS_TASK, ignore_result=True)
def sync_upstreams() -> None:
    """Re-read the catalog of every upstream whose sync interval has passed (``UPSTREAM_SYNC_INTERVAL_SECONDS``,
    or the upstream's own); beat runs this every ``SYNC_UPSTREAMS_CHECK_SECONDS``."""
    from .conf import mcp_settings
    from .federation.sync import sync_upstream
    from .models import Upstream

    for upstream in Upstream.objects.due_for_sync(float(mcp_settings.UPSTREAM_SYNC_INTERVAL_SECONDS)):
        sync_upstream(upstream)
