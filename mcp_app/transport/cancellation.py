"""``notifications/cancelled`` for handshake-era calls: never lost, whenever it arrives.

``register`` a running call under its scope and request id; ``request_cancel`` stops it here, or sends the
cancellation to its call group (``events.call_group``) and notes it for a call that listens later
(``cancelled_before_listening``); ``listening_hooks`` hear when a call listens everywhere. The group's name (a
digest) is only made when the call must be reached from another process: a call is registered here by its key. Design: docs/architecture.md ("SSE streams, resumption and cancellation").
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from channels.layers import get_channel_layer

from ..channel_layer import LAYER_ERRORS, guarded
from ..events import CallCancelled, call_group
from .eventstore import get_event_store

logger = logging.getLogger("mcp_app.transport.cancellation")

CANCEL_WATCH_DELAY_SECONDS = 0.05
CANCEL_MARK_SECONDS = 300.0

# A call's key: its correlation scope and request id, the id's type included (1 is not "1", as in call_group).
CallKey = tuple[str, type, str | int]
_running: dict[CallKey, Callable[[], None]] = {}
listening_hooks: list[Callable[[str], None]] = []


def call_key(scope: str, request_id: str | int) -> CallKey:
    return (scope, type(request_id), request_id)


def register(key: CallKey, cancel: Callable[[], None]) -> None:
    """The call of ``key`` runs in this process; ``cancel`` stops it (called on this event loop)."""
    _running[key] = cancel


def unregister(key: CallKey) -> None:
    _running.pop(key, None)


async def request_cancel(scope: str, request_id: str | int) -> None:
    """Cancel the call of ``request_id`` in ``scope`` wherever it runs, or as soon as it listens."""
    local = _running.get(call_key(scope, request_id))
    if local is not None:
        local()
        return
    group = call_group(scope, request_id)
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
