"""``resources/list``, ``resources/templates/list`` and ``resources/read``.

An unknown URI is -32002 in the handshake era and -32602 in 2026-07-28, both with ``data: {uri}``.
"""

from __future__ import annotations

from typing import Any

from .. import versions
from ..dispatcher import MessageContext
from ..errors import RESOURCE_NOT_FOUND, InvalidParams, InvalidRequest, ProtocolError
from ..ports import Session
from .base import catalog_page, dispatcher, required_string
from .lifecycle import LEGACY_ONLY


@dispatcher.request("resources/list")
async def list_resources(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    return catalog_page(message, params, "resources")


@dispatcher.request("resources/templates/list")
async def list_templates(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    return catalog_page(message, params, "resourceTemplates")


@dispatcher.request("resources/read")
async def read_resource(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    uri = required_string(params, "uri")
    ctx = message.request
    found = ctx.catalog.find_resource(uri)
    if found is None:
        if ctx.era == versions.MODERN:
            raise InvalidParams(f"Resource not found: {uri}", data={"uri": uri})
        raise ProtocolError(f"Resource not found: {uri}", {"uri": uri}, code=RESOURCE_NOT_FOUND)
    resource, variables = found
    call = message.call(params)
    return await ctx.runner.read_resource(resource, uri, variables, call)


def _subscription(params: dict[str, Any], message: MessageContext) -> tuple[str, Session]:
    uri = required_string(params, "uri")
    session = message.request.session
    if session is None:
        raise InvalidRequest("Invalid Request: resource subscriptions need a session (send Mcp-Session-Id)")
    return uri, session


@dispatcher.request("resources/subscribe", eras=LEGACY_ONLY)
async def subscribe(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    uri, session = _subscription(params, message)
    if message.request.catalog.find_resource(uri) is None:
        raise ProtocolError(f"Resource not found: {uri}", {"uri": uri}, code=RESOURCE_NOT_FOUND)
    await session.subscribe(uri)
    return {}


@dispatcher.request("resources/unsubscribe", eras=LEGACY_ONLY)
async def unsubscribe(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    uri, session = _subscription(params, message)
    await session.unsubscribe(uri)
    return {}
