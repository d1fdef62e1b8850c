"""The Celery application of the reference deployment. Broker and backend come from settings (REDIS_URL).

Workers (``make worker``: ``celery -A mcp_host worker``) run the tool calls of bindings with execution "worker"
(``mcp_app.workers``). Celery beat (``make beat``: ``celery -A mcp_host beat``) runs the purge of expired
sessions, tasks and SSE events hourly and the reaper of worker calls past their deadline every 30 s.
"""

import gc
import os

from celery import Celery
from celery.signals import worker_process_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")

app = Celery("mcp_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

from mcp_app.tasks import (  # noqa: E402
    PURGE_INTERVAL_SECONDS,
    PURGE_TASK,
    REAP_INTERVAL_SECONDS,
    REAP_TASK,
    SYNC_UPSTREAMS_CHECK_SECONDS,
    SYNC_UPSTREAMS_TASK,
)


@worker_process_init.connect
@worker_ready.connect
def _freeze_startup_heap(**_kwargs: object) -> None:
    """As in mcp_host.asgi: full collections need not walk the start-up heap (a ~0.1 s pause every so often in
    a worker otherwise, measured by bench/workers.py). Prefork children start from the parent's frozen heap."""
    from mcp_app.conf import mcp_settings

    if mcp_settings.GC_FREEZE_AT_STARTUP:
        gc.collect()
        gc.freeze()


app.conf.beat_schedule = {
    "mcp-purge-expired": {"task": PURGE_TASK, "schedule": PURGE_INTERVAL_SECONDS},
    "mcp-reap-worker-calls": {"task": REAP_TASK, "schedule": REAP_INTERVAL_SECONDS},
    "mcp-sync-upstreams": {"task": SYNC_UPSTREAMS_TASK, "schedule": SYNC_UPSTREAMS_CHECK_SECONDS},
}
