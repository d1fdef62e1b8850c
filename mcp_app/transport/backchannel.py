"""The back-channel of one handshake-era POST: the transport's implementation of the ``Outbound`` port.

``BackChannel`` also makes the call this POST serves cancellable (``watch``, ``release``, ``close``);
correlation is by ``scope``: the session key, or ``t<token pk>`` for sessionless requests. Design:
docs/architecture.md ("Ports"; "SSE streams, resumption and cancellation").

Not here: how the call's response ends when it is cancelled (the edge, through ``on_cancel``), the 2026-07-28
era (no back-channel: ``NO_CHANNEL``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, Correlator, layer_health
from ..conf import mcp_settings
from ..events import Reply, call_group, reply_group
from ..protocol import messages
from . import cancellation
from .membership import Membership
from .writer import ResponseWriter

logger = logging.getLogger("mcp_app.transport")


class BackChannel:
    """``Outbound`` for one handshake-era POST (see the module docstring)."""

    can_request = True

    def __init__(
        self, scope: str, writer: ResponseWriter, membership: Membership, on_cancel: Callable[[], None]
    ) -> None:
        self._scope = scope
        self._writer = writer
        self._membership = membership
        self._on_cancel = on_cancel
        self._answers = Correlator()
        self._key: cancellation.CallKey | None = None
        self._watch: asyncio.Task[None] | None = None
        self._watch_timer: asyncio.TimerHandle | None = None

    # Outbound ------------------------------------------------------------------------------------------

    async def notify(self, message: dict[str, Any]) -> None:
        await self._writer.notify(message)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = f"mcp-host-{secrets.token_hex(12)}"
        group = reply_group(self._scope, request_id)

        async def send() -> None:
            # Listen before asking: the answer may reach another process and come back at once.
            await self._membership.join(group)
            await self._writer.notify(messages.request(request_id, method, params))

        try:
            return await self._answers.ask(
                request_id, send, method=method, within=mcp_settings.CLIENT_REQUEST_TIMEOUT_SECONDS
            )
        finally:
            await self._membership.leave(group)

    async def deliver(self, request_id: str | int, answer: dict[str, Any]) -> None:
        layer = get_channel_layer()
        if layer is not None:
            await layer.group_send(reply_group(self._scope, request_id), Reply(str(request_id), answer).to_wire())

    async def cancel(self, request_id: str | int) -> None:
        await cancellation.request_cancel(self._scope, request_id)

    async def close_stream(self) -> bool:
        return await self._writer.close_stream()

    # Correlation and cancellation of the call this POST serves ---------------------------------------

    def reply(self, reply: Reply) -> None:
        """The client's answer to one of this call's requests."""
        self._answers.resolve(reply.id, reply.answer)

    def watch(self, request_id: str | int) -> None:
        """Make the call of ``request_id`` cancellable, here at once and from other processes soon."""
        self._key = cancellation.call_key(self._scope, request_id)
        cancellation.register(self._key, self._on_cancel)
        # A timer, not a sleeping task: the quick calls, the vast majority, end before it fires and cost only
        # a heap entry (and never name their call group: its digest is made when the timer fires).
        self._watch_timer = asyncio.get_running_loop().call_later(
            cancellation.CANCEL_WATCH_DELAY_SECONDS, self._start_watch, request_id
        )

    def _start_watch(self, request_id: str | int) -> None:
        self._watch_timer = None
        self._watch = asyncio.ensure_future(self._watch_cancellation(call_group(self._scope, request_id)))

    def release(self) -> None:
        """The call has its answer: a cancellation from now on finds nothing to stop in this process."""
        if self._key is not None:
            cancellation.unregister(self._key)

    async def close(self) -> None:
        if self._watch_timer is not None:
            self._watch_timer.cancel()
            self._watch_timer = None
        watch = self._watch
        if watch is not None and not watch.done():
            watch.cancel()
            try:
                await watch
            except asyncio.CancelledError:
                pass
            except Exception:
                logger.exception("background task failed during clean-up")

    async def _watch_cancellation(self, group: str) -> None:
        """Join the call's cancellation group, then honour a cancellation noted before the join."""
        try:
            await self._membership.join(group)
            noted = await cancellation.cancelled_before_listening(group)
        except LAYER_ERRORS as error:
            # The call goes on; only cancellations from other processes cannot reach it while the layer is down.
            layer_health.failed(error)
            return
        if noted:
            self._on_cancel()
        cancellation.announce_listening(group)
