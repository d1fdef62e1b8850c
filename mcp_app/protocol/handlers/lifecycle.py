"""Lifecycle and discovery: ``initialize``/``ping`` (handshake era) and ``server/discover`` (stateless era)."""

from __future__ import annotations

from typing import Any

from .. import handshake_tasks, versions
from ..context import RequestContext
from ..dispatcher import MessageContext, server_info
from ..errors import InvalidParams, InvalidRequest
from ..modern import TASKS_EXTENSION
from ..reporters import LOG_LEVELS
from .base import dispatcher

LEGACY_ONLY = (versions.LEGACY,)
MODERN_ONLY = (versions.MODERN,)


def server_capabilities(ctx: RequestContext) -> dict[str, Any]:
    capabilities: dict[str, Any] = {
        "tools": {"listChanged": True},
        "resources": {"listChanged": True},
        "prompts": {"listChanged": True},
        "completions": {},
    }
    # Log messages: logging/setLevel on a session (handshake era) or _meta logLevel per request (2026-07-28).
    # Resource updates: resources/subscribe on a session, or resourceSubscriptions on subscriptions/listen.
    capabilities["logging"] = {}
    capabilities["resources"]["subscribe"] = True
    return capabilities


@dispatcher.request("initialize", eras=LEGACY_ONLY)
async def initialize(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    ctx = message.request
    supported = versions.handshake_versions(ctx.server.protocol_versions)
    version = versions.negotiate(params.get("protocolVersion"), supported)
    info = server_info()
    if ctx.server.title:
        info["title"] = ctx.server.title
    capabilities = server_capabilities(ctx)
    if ctx.handshake_tasks.available and handshake_tasks.has_tasks(version):
        capabilities["tasks"] = handshake_tasks.server_capability()  # 2025-11-25 experimental tasks
    result: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": info,
    }
    if ctx.server.instructions:
        result["instructions"] = ctx.server.instructions
    return result


@dispatcher.request("ping", eras=LEGACY_ONLY)
async def ping(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    return {}


@dispatcher.notification("notifications/initialized")
async def initialized(params: dict[str, Any], ctx: RequestContext) -> None:
    return None


@dispatcher.request("server/discover", eras=MODERN_ONLY)
async def discover(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    ctx = message.request
    capabilities = server_capabilities(ctx)
    # Extensions are advertised only to clients that declare them.
    if ctx.client_declares_extension(TASKS_EXTENSION) and ctx.tasks.available:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    result: dict[str, Any] = {
        "supportedVersions": versions.newest_first(ctx.server.protocol_versions),
        "capabilities": capabilities,
    }
    if ctx.server.instructions:
        result["instructions"] = ctx.server.instructions
    info = server_info()
    if ctx.server.title:
        info["title"] = ctx.server.title
    result["_meta"] = {"io.modelcontextprotocol/serverInfo": info}
    return result


@dispatcher.request("logging/setLevel", eras=LEGACY_ONLY)
async def set_level(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    level = params.get("level")
    if level not in LOG_LEVELS:
        raise InvalidParams(f"Invalid params: level must be one of {', '.join(LOG_LEVELS)}")
    session = message.request.session
    if session is None:
        raise InvalidRequest("Invalid Request: logging/setLevel needs a session (send Mcp-Session-Id)")
    await session.set_log_level(level)
    return {}


@dispatcher.notification("notifications/cancelled")
async def cancelled(params: dict[str, Any], ctx: RequestContext) -> None:
    """Handshake era: the client cancels one of its running requests (2026-07-28 closes the stream instead)."""
    request_id: Any = params.get("requestId")
    if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
        await ctx.outbound.cancel(request_id)
