"""ASGI entry point: MCP endpoints go to the Channels consumer, everything else (admin, API) to Django.

Once the application is built, the start-up heap is frozen out of the garbage collector's sight
(``MCP_APP["GC_FREEZE_AT_STARTUP"]``, on by default; see docs/performance.md).
"""

import gc
import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")
if not settings.configured:
    # A server process without Redis follows the database's invalidation log: edits made by another process
    # (manage.py shell, a script) reach its caches within a second, without a restart (mcp_app.invalidation).
    os.environ.setdefault("MCP_INVALIDATION", "database")
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from mcp_app.conf import mcp_settings  # noqa: E402
from mcp_app.runtime.durable import recover_orphaned_tasks  # noqa: E402
from mcp_app.transport import twisted_compat  # noqa: E402
from mcp_app.transport.routing import http_urlpatterns  # noqa: E402
from mcp_app.workers.serving.liveness import start_sweeping  # noqa: E402

# Tasks whose process died (kill -9, a crash) are failed now rather than left "working" until their TTL, and
# again every few seconds, with worker calls no worker took or whose worker died (see docs/workers.md).
recover_orphaned_tasks()
if os.environ.get("MCP_LIVENESS_SWEEP", "1") != "0":  # "0": the test runner, which imports this module in-process
    start_sweeping()
# "429 Too Many Requests", not Twisted's "429 Unknown Status"; 414/431/413/408 and one Host, answered by daphne
# before the application (mcp_app.transport.edge_limits); with DAPHNE_TUNING, finished requests reaped at once and
# no form parsing (docs/performance.md). Version-guarded: see mcp_app.transport.twisted_compat.
twisted_compat.install(edge_limits=mcp_settings.EDGE_LIMITS, daphne_tuning=mcp_settings.DAPHNE_TUNING)

application = ProtocolTypeRouter({"http": URLRouter([*http_urlpatterns, re_path(r"", django_application)])})

if mcp_settings.GC_FREEZE_AT_STARTUP:
    # Django's start-up objects live as long as the process: full collections need not walk them every time.
    gc.collect()
    gc.freeze()
