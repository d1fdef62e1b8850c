"""mcp_host: the reference deployment of mcp_app (settings, ASGI application, Celery app). Not in the wheel."""

from .celery import app as celery_app

__all__ = ["celery_app"]
