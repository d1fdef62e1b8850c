"""The Celery application of the reference deployment. Broker and backend come from settings (REDIS_URL).

Workers (``make worker``: ``celery -A mcp_host worker``) run the tool calls of bindings with execution "worker"
(``mcp_app.workers``). Celery beat (``make beat``: ``celery -A mcp_host beat``) runs the purge of expired
sessions, tasks and SSE events hourly and the reaper of worker calls past their deadline every 30 s.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")

app = Celery("mcp_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

from mcp_app.tasks import PURGE_INTERVAL_SECONDS, PURGE_TASK, REAP_INTERVAL_SECONDS, REAP_TASK  # noqa: E402

app.conf.beat_schedule = {
    "mcp-purge-expired": {"task": PURGE_TASK, "schedule": PURGE_INTERVAL_SECONDS},
    "mcp-reap-worker-calls": {"task": REAP_TASK, "schedule": REAP_INTERVAL_SECONDS},
}
