"""``subscriptions/listen`` (2026-07-28): a long-lived SSE stream of the notifications the client opted in to.

The first message acknowledges the subset the server honours; every message carries the listen request's id as
``_meta["io.modelcontextprotocol/subscriptionId"]``; ``translate`` decides which events reach the subscription.
"""

from __future__ import annotations

from typing import Any

from ..context import OpenStream
from ..dispatcher import MessageContext
from ..errors import InvalidParams
from ..modern import META_SUBSCRIPTION_ID
from .base import dispatcher
from .lifecycle import MODERN_ONLY

# Subscription filter key -> the notification it lets through. Servers must not send types not requested.
SUPPORTED_FILTERS = {
    "toolsListChanged": "notifications/tools/list_changed",
    "promptsListChanged": "notifications/prompts/list_changed",
    "resourcesListChanged": "notifications/resources/list_changed",
}
RESOURCE_UPDATED = "notifications/resources/updated"


@dispatcher.request("subscriptions/listen", eras=MODERN_ONLY)
async def listen(params: dict[str, Any], message: MessageContext) -> OpenStream:
    requested = params.get("notifications")
    if not isinstance(requested, dict):
        raise InvalidParams('Invalid params: "notifications" must be an object')
    agreed: dict[str, Any] = {key: True for key in SUPPORTED_FILTERS if requested.get(key) is True}
    methods = {SUPPORTED_FILTERS[key] for key in agreed}
    uris = requested.get("resourceSubscriptions")
    watched: frozenset[str] = frozenset()
    if uris is not None:
        if not isinstance(uris, list) or not all(isinstance(uri, str) for uri in uris):
            raise InvalidParams('Invalid params: "resourceSubscriptions" must be a list of URIs')
        watched = frozenset(uris)
        agreed["resourceSubscriptions"] = sorted(watched)
    subscription_id = message.request_id
    catalog = message.request.catalog

    def stamp(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body = dict(params or {})
        body["_meta"] = {**body.get("_meta", {}), META_SUBSCRIPTION_ID: subscription_id}
        return {"jsonrpc": "2.0", "method": method, "params": body}

    def translate(event: dict[str, Any]) -> dict[str, Any] | None:
        method = event.get("method")
        if method in methods:
            return stamp(method, event.get("params"))
        uri = event.get("params", {}).get("uri")
        if method == RESOURCE_UPDATED and uri in watched and not catalog.withholds_resource(uri):
            # A resource outside the caller's grant is acknowledged like an unknown URI, and stays silent.
            return stamp(method, event.get("params"))
        return None

    acknowledged = stamp("notifications/subscriptions/acknowledged", {"notifications": agreed})
    return OpenStream(first=(acknowledged,), translate=translate)
