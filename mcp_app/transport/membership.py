"""One consumer's place on the channel layer: its channel, the groups it joined, and the pump that feeds it.

A consumer gets a channel only when it first joins a group (most requests never do: a quick ``tools/call``
costs the layer nothing). From then on the channel's subscription (``channel_layer.Subscription``: timeouts
and reconnects never escape) puts the messages this package handles (broadcasts, replies, cancellations, stream
events) into the consumer's own inbox, where its message loop dispatches them. If the layer is
lost, the pump puts ``mcp.layer_down`` there instead, once per outage.

``close`` ends the pump and leaves every group; failures to leave are logged, never raised (membership expires
with the layer's ``group_expiry``).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from channels.layers import get_channel_layer

from ..channel_layer import LayerMessaging, Subscription
from ..events import BROADCAST_EVENT, CANCEL_EVENT, REPLY_EVENT, STREAM_EVENT

logger = logging.getLogger("mcp_app.transport")

LAYER_DOWN_EVENT = "mcp.layer_down"
_FORWARDED = (BROADCAST_EVENT, REPLY_EVENT, CANCEL_EVENT, STREAM_EVENT)


class Inbox(Protocol):
    """Where the pump puts what it receives: the consumer's message loop (never blocks, never fails)."""

    def put_nowait(self, message: dict[str, Any]) -> None: ...


class Membership:
    """The channel-layer groups of one consumer, feeding ``inbox``."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._subscription: Subscription | None = None

    @property
    def groups(self) -> list[str]:
        return self._subscription.groups if self._subscription is not None else []

    async def join(self, group: str) -> None:
        """Join ``group`` (again: refreshes membership on layers that expire groups). No layer: nothing."""
        if self._subscription is None:
            layer = get_channel_layer()
            if layer is None:
                return

            async def lost(_error: BaseException) -> None:
                self._inbox.put_nowait({"type": LAYER_DOWN_EVENT})

            self._subscription = await LayerMessaging(layer).subscribe(on_message=self._forward, on_error=lost)
        await self._subscription.join(group)

    def _forward(self, message: dict[str, Any]) -> None:
        if message.get("type") in _FORWARDED:
            self._inbox.put_nowait(message)

    async def leave(self, group: str) -> None:
        if self._subscription is not None and group in self._subscription.groups:
            await self._subscription.leave(group)

    async def close(self) -> None:
        """Stop the pump and leave every group."""
        if self._subscription is not None:
            await self._subscription.close()
