"""The one wait for a durable call's record: worker calls and ``tasks/result`` of both task eras await it here.

``until_settled(record, events, ...)`` returns the record once ``done(record)`` holds (by default
``outcomes.settled``: terminal, or parked waiting for input), or ``None`` when ``read`` (by default ``reload``: by
its primary key) finds it no more. Meanwhile:

- each event from ``events`` (the caller's subscription, joined before the record was last read, so that a change
  after that read is heard) goes to ``on_event``, which relays it and returns a record the event carries (checked
  at once, not read back), ``True`` when the event says the record changed (it is read now), or ``False``; without
  ``on_event`` every event means the record changed;
- when no event came for ``every`` seconds the record is read again (a lost event only delays the wait), then
  ``on_recheck(record)`` runs when given (the worker path's liveness check); the delay doubles up to ``most``
  after each such read, and goes back to ``every`` when ``on_recheck`` returns ``True`` (it moved the record).

It owns no subscription, lease or cancellation: a ``CancelledError`` reaches the caller unchanged, which cancels
or detaches the call as its kind prescribes.
"""

from __future__ import annotations

import asyncio
import functools
from asyncio import wait_for
from collections.abc import Awaitable, Callable
from typing import TypeVar

from channels.db import database_sync_to_async

from ...models import ToolTask
from .outcomes import settled

Event = TypeVar("Event")


async def reload(pk: int) -> ToolTask | None:
    """The record ``pk`` as it is now; ``None`` when it is gone."""
    record: ToolTask | None = await database_sync_to_async(ToolTask.objects.load)(pk)
    return record


async def until_settled(
    record: ToolTask | None,
    events: asyncio.Queue[Event],
    *,
    read: Callable[[], Awaitable[ToolTask | None]] | None = None,
    every: float,
    most: float | None = None,
    on_event: Callable[[Event], Awaitable[ToolTask | bool]] | None = None,
    on_recheck: Callable[[ToolTask], Awaitable[bool]] | None = None,
    done: Callable[[ToolTask], bool] = settled,
) -> ToolTask | None:
    """Wait until ``record`` (as last read; ``None``: gone) is done (see the module docstring)."""
    if record is None or done(record):
        return record
    read = read or functools.partial(reload, record.pk)
    ceiling = every if most is None else most
    delay = every
    while record is not None and not done(record):
        try:
            event = await wait_for(events.get(), delay)
        except TimeoutError:
            record = await read()
            if record is None or done(record):
                break
            # A hook that moved the record (failed, or re-queued it) has it read again soon.
            moved = on_recheck is not None and await on_recheck(record)
            delay = every if moved else min(delay * 2, ceiling)
            continue
        heard = True if on_event is None else await on_event(event)
        if isinstance(heard, ToolTask):
            if done(heard):
                return heard
        elif heard:
            record = await read()
    return record
