"""One consumer's place on the channel layer: its channel, the groups it joined, and the pump that feeds it.

A consumer gets a channel only when it first joins a group (most requests never do: a quick ``tools/call``
costs the layer nothing). From then on a pump task receives from that channel (``receive_forever``: timeouts
and reconnects never escape) and puts the messages this package handles (broadcasts, replies, cancellations,
stream events) into the consumer's own inbox, where its message loop dispatches them. If the layer is
lost, the pump puts ``mcp.layer_down`` there instead, once per outage.

``close`` ends the pump and leaves every group; failures to leave are logged, never raised (membership expires
with the layer's ``group_expiry``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, receive_forever
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
        self._layer: Any = None
        self._channel: str | None = None
        self._pump: asyncio.Task[None] | None = None
        self.groups: list[str] = []

    async def join(self, group: str) -> None:
        """Join ``group`` (again: refreshes membership on layers that expire groups). No layer: nothing."""
        layer = self._layer or get_channel_layer()
        if layer is None:
            return
        if self._channel is None:
            self._layer = layer
            self._channel = await layer.new_channel()
            self._pump = asyncio.create_task(self._run_pump())
        await layer.group_add(group, self._channel)
        if group not in self.groups:
            self.groups.append(group)

    async def leave(self, group: str) -> None:
        if self._layer is not None and self._channel is not None and group in self.groups:
            self.groups.remove(group)
            await self._layer.group_discard(group, self._channel)

    async def close(self) -> None:
        """Stop the pump and leave every group."""
        pump = self._pump
        if pump is not None and not pump.done():
            pump.cancel()
            try:
                await pump
            except asyncio.CancelledError:
                pass
            except Exception:
                logger.exception("background task failed during clean-up")
        if self._layer is None or self._channel is None:
            return
        for group in self.groups:
            try:
                await self._layer.group_discard(group, self._channel)
            except LAYER_ERRORS as error:
                # Membership expires with the layer's group_expiry; nothing to repair here.
                logger.info("could not leave group %s: %s", group, type(error).__name__)
            except Exception:
                logger.warning("could not leave group %s", group, exc_info=True)

    async def _run_pump(self) -> None:
        assert self._layer is not None and self._channel is not None

        async def lost(_error: BaseException) -> None:
            self._inbox.put_nowait({"type": LAYER_DOWN_EVENT})

        async for message in receive_forever(self._layer, self._channel, on_error=lost):
            if message.get("type") in _FORWARDED:
                self._inbox.put_nowait(message)
