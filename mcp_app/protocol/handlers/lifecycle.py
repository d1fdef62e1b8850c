"""Lifecycle and discovery: ``initialize``/``ping`` (handshake era) and ``server/discover`` (stateless era)."""

from __future__ import annotations

from typing import Any

from .. import handshake_tasks, versions
from ..context import RequestContext
from ..dispatcher import MessageContext, server_info
from ..errors import InvalidParams, InvalidRequest
from ..jsonrpc import valid_id
from ..modern import META_SERVER_INFO, TASKS_EXTENSION
from ..reporters import LOG_LEVELS
from .base import dispatcher

LEGACY_ONLY = (versions.LEGACY,)
MODERN_ONLY = (versions.MODERN,)


def server_capabilities() -> dict[str, Any]:
    # Log messages: logging/setLevel on a session (handshake era) or _meta logLevel per request (2026-07-28).
    # Resource updates: resources/subscribe on a session, or resourceSubscriptions on subscriptions/listen.
    return {
        "tools": {"listChanged": True},
        "resources": {"listChanged": True, "subscribe": True},
        "prompts": {"listChanged": True},
        "completions": {},
        "logging": {},
    }


def _server_info(ctx: RequestContext) -> dict[str, Any]:
    """``server_info()`` with the hosted server's title, if it has one."""
    return {**server_info(), "title": ctx.server.title} if ctx.server.title else server_info()


def _with_instructions(result: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
    return {**result, "instructions": ctx.server.instructions} if ctx.server.instructions else result


@dispatcher.request("initialize", eras=LEGACY_ONLY)
async def initialize(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    ctx = message.request
    version = versions.negotiate(
        params.get("protocolVersion"), versions.handshake_versions(ctx.server.protocol_versions)
    )
    capabilities = server_capabilities()
    if ctx.handshake_tasks.available and handshake_tasks.has_tasks(version):
        capabilities["tasks"] = handshake_tasks.server_capability()  # 2025-11-25 experimental tasks
    return _with_instructions(
        {"protocolVersion": version, "capabilities": capabilities, "serverInfo": _server_info(ctx)}, ctx
    )


@dispatcher.request("ping", eras=LEGACY_ONLY)
async def ping(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    return {}


@dispatcher.request("server/discover", eras=MODERN_ONLY)
async def discover(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    ctx = message.request
    capabilities = server_capabilities()
    # Extensions are advertised only to clients that declare them.
    if ctx.client_declares_extension(TASKS_EXTENSION) and ctx.tasks.available:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    result = {"supportedVersions": versions.newest_first(ctx.server.protocol_versions), "capabilities": capabilities}
    return {**_with_instructions(result, ctx), "_meta": {META_SERVER_INFO: _server_info(ctx)}}


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
    request_id = params.get("requestId")
    if valid_id(request_id):
        await ctx.outbound.cancel(request_id)
