"""URL patterns for the ASGI router: mount ``http_urlpatterns`` in your ``URLRouter``.

``http_urlpatterns`` is the MCP endpoint (``mcp_urlpatterns``) plus the operations endpoints ``/healthz``,
``/readyz`` and ``/metrics`` (``ops_urlpatterns``); mount the two lists separately to place them elsewhere.
"""

from django.urls import re_path

from ..observability.asgi import instrument
from ..observability.endpoints import healthz, metrics_endpoint, readyz
from .consumer import McpConsumer

# Channels' ``URLRouter`` routes ASGI applications with Django's ``re_path``, whose stubs expect Django views
# (hence the ``arg-type`` ignores below).
mcp_urlpatterns = [re_path(r"^mcp/(?P<server_id>[-a-zA-Z0-9_]+)/?$", instrument(McpConsumer.as_asgi()))]
ops_urlpatterns = [
    re_path(r"^healthz/?$", healthz),  # type: ignore[arg-type]
    re_path(r"^readyz/?$", readyz),  # type: ignore[arg-type]
    re_path(r"^metrics/?$", metrics_endpoint),  # type: ignore[arg-type]
]
http_urlpatterns = [*mcp_urlpatterns, *ops_urlpatterns]
