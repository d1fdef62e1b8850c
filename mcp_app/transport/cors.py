"""CORS for browser clients (the MCP Inspector, web agents) of servers that list their ``allowed_origins``.

``preflight`` answers ``OPTIONS`` from the per-process server snapshot: 204 with the CORS headers to an origin
the server allows, else the same 403 without any. ``response_headers`` go on answers to an allowed origin;
``server_allows`` decides for refusals before the grant. Design: docs/robustness.md ("CORS").
"""

from __future__ import annotations

from collections.abc import Mapping

from channels.db import database_sync_to_async

from ..caching import identity
from ..caching.identity import CacheMiss
from ..conf import mcp_settings
from ..protocol.serving import Answer, refusal
from .security import canonical_origin, origin_listed, same_origin

METHODS = "GET, POST, DELETE, OPTIONS"
ORIGIN_REFUSED = "This Origin is not allowed to use this server."
ALLOWED_REQUEST_HEADERS = frozenset(
    {
        "authorization",
        "content-type",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "mcp-method",
        "mcp-name",
    }
)
PARAM_HEADER_PREFIX = "mcp-param-"
EXPOSED = b"Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After"


def allowed_request_headers(requested: str | None) -> str:
    """The asked-for request headers MCP uses (others are left out, so the browser refuses them)."""
    names = [name.strip().lower() for name in (requested or "").split(",") if name.strip()]
    kept = [name for name in names if name in ALLOWED_REQUEST_HEADERS or name.startswith(PARAM_HEADER_PREFIX)]
    return ", ".join(kept or sorted(ALLOWED_REQUEST_HEADERS))


async def preflight(server_id: str, headers: Mapping[str, str]) -> Answer:
    """The answer to ``OPTIONS`` (see the module docstring); without an Origin, a plain one naming the methods."""
    origin = headers.get("origin")
    if origin is None or "access-control-request-method" not in headers:
        return Answer(204, headers=(("allow", METHODS),))
    canonical = canonical_origin(origin)
    if canonical is None or not await server_allows(server_id, canonical, headers.get("host")):
        return refusal(403, ORIGIN_REFUSED)
    requested = headers.get("access-control-request-headers")
    allowed = (
        ("access-control-allow-origin", canonical),
        ("access-control-allow-methods", METHODS),
        ("access-control-allow-headers", allowed_request_headers(requested)),
        ("access-control-max-age", str(mcp_settings.CORS_MAX_AGE_SECONDS)),
        ("vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
    )
    return Answer(204, headers=allowed)


async def server_allows(server_id: str, origin: str, host: str | None) -> bool:
    """Whether the servable server ``server_id`` takes requests from ``origin`` (canonical: its allowed origins,
    ``ALLOWED_ORIGINS``, or its own origin), from the per-process server cache (one worker-thread load when
    this process has not seen the server yet). An unknown server allows only ``ALLOWED_ORIGINS``, like any."""
    try:
        server = identity.server(server_id, load=False)
    except CacheMiss:
        server = await database_sync_to_async(identity.server)(server_id, load=True)
    if server is None:
        return origin_listed(origin, ())
    return origin_listed(origin, server.allowed_origins) or same_origin(origin, host)


def response_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", EXPOSED),
        (b"vary", b"Origin"),
    ]
