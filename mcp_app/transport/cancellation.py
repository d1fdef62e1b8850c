"""``notifications/cancelled`` for handshake-era calls: never lost, whenever it arrives.

``register`` a running call under its call group; ``request_cancel`` stops it here, or sends the cancellation to
the group and notes it for a call that listens later (``cancelled_before_listening``); ``listening_hooks`` hear
when a call listens everywhere. Design: docs/architecture.md ("SSE streams, resumption and cancellation").
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, guarded
from ..events import CallCancelled
from .eventstore import get_event_store

logger = logging.getLogger("mcp_app.transport.cancellation")

CANCEL_WATCH_DELAY_SECONDS = 0.05
CANCEL_MARK_SECONDS = 300.0

_running: dict[str, Callable[[], None]] = {}
listening_hooks: list[Callable[[str], None]] = []


def register(group: str, cancel: Callable[[], None]) -> None:
    """The call of ``group`` runs in this process; ``cancel`` stops it (called on this event loop)."""
    _running[group] = cancel


def unregister(group: str) -> None:
    _running.pop(group, None)


async def request_cancel(group: str) -> None:
    """Cancel the call of ``group`` wherever it runs, or as soon as it listens."""
    local = _running.get(group)
    if local is not None:
        local()
        return
    try:
        await get_event_store().mark(f"cancel:{group}", CANCEL_MARK_SECONDS)
    except LAYER_ERRORS:
        logger.warning("could not note a cancellation for later (the store is unreachable)")
    layer = get_channel_layer()
    if layer is not None:
        await guarded(layer.group_send(group, CallCancelled().to_wire()))


async def cancelled_before_listening(group: str) -> bool:
    """Whether a cancellation for ``group`` was noted before the call joined its group."""
    return await get_event_store().marked(f"cancel:{group}")


def announce_listening(group: str) -> None:
    for hook in list(listening_hooks):
        hook(group)
