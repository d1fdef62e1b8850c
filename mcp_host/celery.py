"""The Celery application of the reference deployment. Broker and backend come from settings (REDIS_URL)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")

app = Celery("mcp_host")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
