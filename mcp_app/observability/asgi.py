"""``instrument(app)``: the ASGI wrapper that gives each MCP request its log context, metrics and access line.

Around the MCP consumer it opens a ``logging.RequestInfo`` (a plausible ``X-Request-ID`` or a fresh one, echoed on
the response), counts the response, its duration and open SSE responses, runs the ASGI instrumentation's HTTP span
when tracing is on, and writes one ``mcp_app.access`` line (of 401 and 429 at most one per
``REFUSAL_LOG_INTERVAL_SECONDS``). Cost per request: a few attribute writes, two increments, one line. The line
takes ``logging.write_direct``'s own path when the access logger's one handler is a plain stream or file handler
with mcp_app's formatters (the reference settings), the logging path otherwise (``caplog``, a deployment's own
handlers): the same text either way.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any
from urllib.parse import parse_qs

from . import metrics, tracing
from .endpoints import header
from .logging import RequestInfo, end_request, new_request_id, start_request, write_direct

access_logger = logging.getLogger("mcp_app.access")
SAMPLED_STATUSES = frozenset({401, 429})
REFUSAL_LOG_INTERVAL_SECONDS = 1.0
_refusals = {"next": 0.0, "skipped": 0}  # one event loop per process writes it: no lock needed


def _refusal_logged(status: int) -> int | None:
    """For a sampled status: ``None`` to leave the line out, else how many were left out before it."""
    if status not in SAMPLED_STATUSES:
        return 0
    now = time.monotonic()
    if now < _refusals["next"]:
        _refusals["skipped"] += 1
        return None
    _refusals["next"] = now + REFUSAL_LOG_INTERVAL_SECONDS
    skipped, _refusals["skipped"] = int(_refusals["skipped"]), 0
    return skipped


_SSE = b"text/event-stream"
_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,63}$")  # what an agent id can be; anything else is not logged


# The claimed agent of each query string seen lately: clients send the same URL on every call.
_claimed: dict[bytes, str] = {}
_CLAIMED_KEPT = 1024  # query strings remembered at most (then forgotten all at once): bounded against varied URLs


def _claimed_agent(scope: dict[str, Any]) -> str:
    query = scope.get("query_string", b"")
    if b"agentId=" not in query:
        return ""
    agent = _claimed.get(query)
    if agent is None:
        value = (parse_qs(query.decode("latin-1")).get("agentId") or [""])[0]
        agent = value if _SLUG.match(value) else "?"
        if len(_claimed) >= _CLAIMED_KEPT:
            _claimed.clear()
        _claimed[query] = agent
    return agent


def _write_access_line(status: int, skipped: int, info: RequestInfo, seconds: float) -> None:
    """``mcp_app.access``'s line: by ``write_direct`` when it can, else as ``access_logger.info`` would write it but
    for the caller's frame (the record is made without ``findCaller``'s walk of the stack: its ``funcName`` names
    this function, its ``lineno`` 0)."""
    if not access_logger.isEnabledFor(logging.INFO):
        return
    message = "%s %s %s %.1fms" + (f" ({skipped} more {status} not logged)" if skipped else "")
    args = (info.http_method, info.path, status or "-", seconds * 1000)
    extra = {
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
        "http_method": info.http_method,
        "path": info.path,
    }
    if write_direct(access_logger, message % args, extra, info):
        return
    record = access_logger.makeRecord(
        access_logger.name, logging.INFO, __file__, 0, message, args, None, "_write_access_line", extra
    )
    access_logger.handle(record)


def instrument(app: Any) -> Any:
    """Wrap an HTTP ASGI application (the MCP consumer) with request context, metrics and an access line (and,
    when tracing is on, the ASGI instrumentation's HTTP span)."""

    async def instrumented(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        kwargs = scope.get("url_route", {}).get("kwargs", {})
        info = RequestInfo(
            request_id=new_request_id(header(scope, b"x-request-id")),
            http_method=scope.get("method", ""),
            path=scope.get("path", ""),
            server=str(kwargs.get("server_id", ""))[:63],
            agent=_claimed_agent(scope),
        )
        request_id = info.request_id.encode()
        status = 0
        streaming = False

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status, streaming
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                if any(key == b"content-type" and value.startswith(_SSE) for key, value in headers):
                    streaming = True
                    metrics.stream_opened()
                message = {**message, "headers": [*headers, (b"x-request-id", request_id)]}
            await send(message)

        token = start_request(info)
        try:
            tracer = tracing.active()
            await (app if tracer is None else tracer.asgi(app))(scope, receive, send_with_id)
        finally:
            if streaming:
                metrics.stream_closed()
            seconds = time.perf_counter() - info.started
            rpc_method = info.method or "-"
            metrics.record_request(info.http_method, rpc_method, info.era or "-", status, seconds)
            skipped = _refusal_logged(status)
            if skipped is not None:
                _write_access_line(status, skipped, info, seconds)
            end_request(token)

    return instrumented
