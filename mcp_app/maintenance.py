"""Housekeeping of expired state: one function that the ``mcp_purge`` command, a beat schedule or an operator's
own job calls.

``purge_expired()`` deletes, through each manager's own verb, tool calls older than ``AUDIT_RETENTION_DAYS``
(``ToolCall.objects.delete_expired``), sessions idle past ``SESSION_IDLE_SECONDS`` or terminated
(``McpSession.objects.delete_expired``) and tasks past their time to live (``ToolTask.objects.delete_expired``),
and returns how many rows of each went. ``dry_run=True`` runs the very same deletes in a transaction that is
rolled back, so the counts are exact and nothing changes. Other stores (e.g. an event store) can add a purger
with ``register_purger``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from .conf import mcp_settings
from .models import McpSession, ToolCall, ToolTask

Purger = Callable[[datetime], int]


def _tool_calls(now: datetime) -> int:
    return ToolCall.objects.delete_expired(mcp_settings.AUDIT_RETENTION_DAYS, now=now)


def _sessions(now: datetime) -> int:
    return McpSession.objects.delete_expired(mcp_settings.SESSION_IDLE_SECONDS, now=now)


def _tasks(now: datetime) -> int:
    return ToolTask.objects.delete_expired()


PURGERS: dict[str, Purger] = {"tool calls": _tool_calls, "sessions": _sessions, "tasks": _tasks}


def register_purger(name: str, purger: Purger) -> None:
    """Add a kind of expired state to ``purge_expired`` (``purger(now)`` deletes and returns a count)."""
    PURGERS[name] = purger


def purge_expired(*, dry_run: bool = False, now: datetime | None = None) -> dict[str, int]:
    """Delete expired tool calls, sessions and tasks (and whatever was registered); counts by kind."""
    now = now or timezone.now()
    with transaction.atomic():
        counts = {name: purger(now) for name, purger in PURGERS.items()}
        if dry_run:
            transaction.set_rollback(True)
    return counts
