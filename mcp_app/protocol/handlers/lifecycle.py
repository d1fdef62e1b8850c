"""``initialize``, ``ping`` and the lifecycle notifications of the handshake era."""

from __future__ import annotations

from typing import Any

from ... import PRODUCT_NAME, __version__
from .. import versions
from ..context import RequestContext
from ..dispatcher import MessageContext
from . import dispatcher


def server_capabilities(ctx: RequestContext) -> dict[str, Any]:
    return {"tools": {"listChanged": True}}


@dispatcher.request("initialize")
async def initialize(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    ctx = message.request
    version = versions.negotiate(params.get("protocolVersion"))
    server_info: dict[str, Any] = {"name": PRODUCT_NAME, "version": __version__}
    if ctx.server.title:
        server_info["title"] = ctx.server.title
    result: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": server_capabilities(ctx),
        "serverInfo": server_info,
    }
    if ctx.server.instructions:
        result["instructions"] = ctx.server.instructions
    return result


@dispatcher.request("ping")
async def ping(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    return {}


@dispatcher.notification("notifications/initialized")
async def initialized(params: dict[str, Any], ctx: RequestContext) -> None:
    return None
