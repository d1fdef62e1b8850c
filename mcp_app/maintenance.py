"""Housekeeping of expired state: one function that the ``mcp_purge`` command, a beat schedule or an operator's
own job calls.

``purge_expired()`` deletes, through each manager's ``delete_expired``, tool calls older than
``AUDIT_RETENTION_DAYS``, sessions idle or terminated and tasks past their time to live, and returns the count of
each; ``dry_run=True`` runs the very same deletes in a transaction that is rolled back (exact counts, nothing
changed). ``register_purger`` adds another store; one outside the database must honour ``dry_run`` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from .conf import mcp_settings
from .models import McpSession, ToolCall, ToolTask

#: ``purger(now, dry_run)`` deletes what expired (or, with ``dry_run``, only counts it) and returns the count.
Purger = Callable[[datetime, bool], int]


# Database purgers delete even in a dry run: purge_expired rolls the transaction back.
def _tool_calls(now: datetime, dry_run: bool) -> int:
    return ToolCall.objects.delete_expired(mcp_settings.AUDIT_RETENTION_DAYS, now=now)


def _sessions(now: datetime, dry_run: bool) -> int:
    return McpSession.objects.delete_expired(mcp_settings.SESSION_IDLE_SECONDS, now=now)


def _tasks(now: datetime, dry_run: bool) -> int:
    return ToolTask.objects.delete_expired()


PURGERS: dict[str, Purger] = {"tool calls": _tool_calls, "sessions": _sessions, "tasks": _tasks}


def register_purger(name: str, purger: Purger) -> None:
    """Add a kind of expired state to ``purge_expired`` (printed by ``mcp_purge`` as ``name``)."""
    PURGERS[name] = purger


def purge_expired(*, dry_run: bool = False, now: datetime | None = None) -> dict[str, int]:
    """Delete expired tool calls, sessions and tasks (and whatever was registered); counts by kind."""
    now = now or timezone.now()
    with transaction.atomic():
        counts = {name: purger(now, dry_run) for name, purger in PURGERS.items()}
        if dry_run:
            transaction.set_rollback(True)
    return counts
