"""The floor of our stack: a minimal Channels consumer that answers like mcp-host, with nothing of mcp-host in it.

Served by daphne (``daphne bench.channels_floor:application``) with the same Django settings as mcp-host
(``DJANGO_SETTINGS_MODULE``, default ``mcp_host.settings``), it measures what Django's set-up, the Channels
router and an ``AsyncHttpConsumer`` (with its per-message ``aclose_old_connections`` hop) cost on top of the
bare ASGI app of ``bench/baseline_app.py``: no authorization, no catalog, no protocol.

- ``POST /`` (any path but ``/sse``): reads the body and answers the fixed JSON-RPC result of
  ``bench.baseline_app.RESULT`` with the same headers;
- ``POST /sse``: answers ``text/event-stream`` with ``PROGRESS_EVENTS`` ``notifications/progress`` events and
  then the result, one ``http.response.body`` message each, as mcp-host streams a ``tools/call`` with progress;
  ``?steps=N`` changes the count (1-100).

Anything else (GET, DELETE) gets 405. It keeps no state and touches no database. Like ``mcp_host.asgi`` (with
``GC_FREEZE_AT_STARTUP``, the default) it freezes the start-up heap out of the garbage collector's sight.
"""

from __future__ import annotations

import gc
import os
from typing import Any
from urllib.parse import parse_qs

import django
import orjson

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_host.settings")
django.setup()

from channels.generic.http import AsyncHttpConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from bench.baseline_app import JSON_HEADERS, RESULT  # noqa: E402

PROGRESS_EVENTS = 10
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]


def progress_event(step: int, total: int) -> bytes:
    notification = {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": step, "total": total, "message": f"step {step} of {total}"},
    }
    return b"event: message\ndata: " + orjson.dumps(notification) + b"\n\n"


class FloorConsumer(AsyncHttpConsumer):
    """Answers every POST with the fixed result, as JSON or (``/sse``) as a progress stream."""

    async def handle(self, body: bytes) -> None:
        scope: dict[str, Any] = self.scope
        if scope["method"] != "POST":
            await self.send_response(405, b"", headers=[(b"allow", b"POST")])
            return
        if scope["path"].rstrip("/") != "/sse":
            await self.send_response(200, RESULT, headers=JSON_HEADERS)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        steps = min(max(int(query.get("steps", [PROGRESS_EVENTS])[0]), 1), 100)
        await self.send_headers(status=200, headers=SSE_HEADERS)
        for step in range(1, steps + 1):
            await self.send_body(progress_event(step, steps), more_body=True)
        await self.send_body(b"event: message\ndata: " + RESULT + b"\n\n")


application = ProtocolTypeRouter({"http": URLRouter([re_path(r"", FloorConsumer.as_asgi())])})

# As mcp_host.asgi does by default (GC_FREEZE_AT_STARTUP): full collections skip Django's start-up heap.
gc.collect()
gc.freeze()
