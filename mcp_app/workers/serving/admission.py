"""Admission of worker calls: a slot of the caller's tenant and of its agent before a call is recorded.

``admit(principal, call_id)`` takes the slot (``limits.quotas.acquire`` with the limits the request's
``Principal`` carries: no query) or raises ``QuotaExceeded`` (-32010); ``listen_and_admit(task_id, principal,
bus)`` does it while the call's event group is joined on ``bus`` and (on a worker) its cancellation channel is
enrolled in its task group (``enrol``); ``undispatched`` gives back what it took for a call that was not
dispatched after all. Who gives the slot back, and when: docs/quotas.md. Not owned here: the leases (``quotas``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ...channel_layer import LAYER_ERRORS, LayerMessaging, Messaging
from ...events import task_group, worker_cancel_channel, worker_group
from ...limits import quotas
from ...protocol.context import Principal
from ..message import WorkerEvent
from .inbox import listen


async def admit(principal: Principal | None, call_id: str) -> quotas.Lease | None:
    """Take a slot for one worker call of ``principal``; ``None`` when the caller has no database identity (no
    tenant or agent to count against). Raises ``QuotaExceeded``."""
    if principal is None or principal.tenant_pk is None or principal.agent_pk is None:
        return None
    tenant_limit, agent_limit = quotas.limits_for(principal)
    return await quotas.acquire(
        call_id,
        tenant_pk=principal.tenant_pk,
        agent_pk=principal.agent_pk,
        tenant_limit=tenant_limit,
        agent_limit=agent_limit,
    )


async def release(lease: quotas.Lease | None) -> None:
    if lease is not None:
        await lease.release()


async def listen_and_admit(
    task_id: str, principal: Principal, bus: Messaging
) -> tuple[asyncio.Queue[WorkerEvent], Any, quotas.Lease | None]:
    """``_listen`` to the new call's events, ``admit`` it and (on a worker) ``enrol`` its cancellation channel,
    all at the same time; on failure of one, the others are undone and the failure raised (a refusal first)."""
    joined, admitted, enrolled = await asyncio.gather(
        listen(worker_group(task_id), bus),
        admit(principal, task_id),
        enrol(task_id, bus),
        return_exceptions=True,
    )
    failed = [outcome for outcome in (admitted, joined, enrolled) if isinstance(outcome, BaseException)]
    if failed:
        if not isinstance(joined, BaseException):
            await joined[1]()
        if not isinstance(admitted, BaseException):
            await release(admitted)
        if not isinstance(enrolled, BaseException):
            await withdraw(task_id, bus)
        raise failed[0]
    queue, leave = joined
    return queue, leave, admitted


async def enrol(task_id: str, bus: Messaging) -> None:
    """Make the worker's cancellation channel (``events.worker_cancel_channel``, which says why) a member of the
    call's task group before the call is dispatched. Nothing to do for a call that runs in this process."""
    if isinstance(bus, LayerMessaging):
        await bus.layer.group_add(task_group(task_id), worker_cancel_channel(task_id))


async def withdraw(task_id: str, bus: Messaging) -> None:
    """Undo ``enrol`` for a call that was not dispatched after all (refused, failed, or attached to another)."""
    if isinstance(bus, LayerMessaging):
        with contextlib.suppress(*LAYER_ERRORS):
            await bus.layer.group_discard(task_group(task_id), worker_cancel_channel(task_id))


async def undispatched(
    task_id: str, lease: quotas.Lease | None, leave: Any, bus: Messaging, error: BaseException | None = None
) -> None:
    """What ``listen_and_admit`` took for a call that was not dispatched, given back: its slot, its event group
    and its enrolled cancellation channel. A request cancelled while dispatching keeps the channel enrolled: its
    call may have been dispatched by then (the database thread goes on), and must stay cancellable; the layer's
    group expiry removes it otherwise."""
    await release(lease)
    await leave()
    if not isinstance(error, asyncio.CancelledError):
        await withdraw(task_id, bus)
