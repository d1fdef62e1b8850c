"""ASGI entry point: MCP endpoints go to the Channels consumer, everything else (admin, API) to Django."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from mcp_app.conf import mcp_settings  # noqa: E402
from mcp_app.runtime.tasks import recover_orphaned_tasks  # noqa: E402
from mcp_app.transport import daphne_tuning, edge_limits  # noqa: E402
from mcp_app.transport.routing import http_urlpatterns  # noqa: E402

# Tasks whose process died (kill -9, a crash) are failed now rather than left "working" until their TTL.
recover_orphaned_tasks()
# 414/431/413/408 and one Host, answered by daphne before the application (see mcp_app.transport.edge_limits).
if mcp_settings.EDGE_LIMITS:
    edge_limits.install()
# Reap finished requests at once, skip Twisted's form parsing (version-guarded; see docs/performance.md).
if mcp_settings.DAPHNE_TUNING:
    daphne_tuning.install()

application = ProtocolTypeRouter({"http": URLRouter([*http_urlpatterns, re_path(r"", django_application)])})
