"""Last-used stamps of tokens and activity of sessions, written off the request path in batches
(docs/architecture.md).

``token_used`` and ``session_seen`` queue a row in memory (coalesced, at most once per
``TOKEN_LAST_USED_INTERVAL_SECONDS`` or ``SESSION_TOUCH_SECONDS``); a daemon thread writes them every
``WRITE_BEHIND_INTERVAL_SECONDS`` and at exit, in one transaction, stamps only moving forward, and closes its
connections after each flush. Past ``WRITE_BEHIND_MAX_PENDING`` rows, new ones are dropped and counted.
"""

from __future__ import annotations

import atexit
import logging
import threading
from datetime import datetime, timedelta

from django.db import connections, models, transaction

from ..conf import AppSettings, mcp_settings
from ..database import log_failure
from .identity import SessionEntry, TokenEntry

logger = logging.getLogger("mcp_app.caching")

SESSION_TOUCH_SECONDS = 30

_lock = threading.Lock()
_tokens: dict[int, datetime] = {}
_sessions: dict[int, datetime] = {}
_wake = threading.Event()
_thread: threading.Thread | None = None
dropped = 0


def token_used(entry: TokenEntry, now: datetime) -> None:
    interval = timedelta(seconds=float(mcp_settings.TOKEN_LAST_USED_INTERVAL_SECONDS))
    if entry.last_used_at is not None and now - entry.last_used_at < interval:
        return
    entry.last_used_at = now
    _queue(_tokens, entry.pk, now)


def session_seen(entry: SessionEntry, now: datetime) -> None:
    if now > entry.last_seen_at:
        entry.last_seen_at = now
    if now - entry.stored_seen_at < timedelta(seconds=SESSION_TOUCH_SECONDS):
        return
    entry.stored_seen_at = now
    _queue(_sessions, entry.pk, now)


def _queue(pending: dict[int, datetime], pk: int, now: datetime) -> None:
    global dropped
    with _lock:
        if pk not in pending and len(_tokens) + len(_sessions) >= mcp_settings.WRITE_BEHIND_MAX_PENDING:
            dropped += 1
            _wake.set()
            return
        if pending.get(pk, now) <= now:
            pending[pk] = now
    _start()


def discard() -> None:
    """Forget what is queued (tests: the rows may already be gone)."""
    with _lock:
        _tokens.clear()
        _sessions.clear()


def pending() -> int:
    with _lock:
        return len(_tokens) + len(_sessions)


def flush() -> int:
    """Write what is queued now, from the calling thread; returns how many rows were queued."""
    from ..models import AgentToken, McpSession

    with _lock:
        tokens, sessions = dict(_tokens), dict(_sessions)
        _tokens.clear()
        _sessions.clear()
    if not tokens and not sessions:
        return 0
    try:
        with transaction.atomic():
            for pk, moment in tokens.items():
                AgentToken.objects.filter(pk=pk).filter(
                    models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=moment)
                ).update(last_used_at=moment)
            for pk, moment in sessions.items():
                McpSession.objects.filter(pk=pk, last_seen_at__lt=moment).update(last_seen_at=moment)
    except Exception:
        log_failure(logger, "could not write %d last-used stamps and session activities", len(tokens) + len(sessions))
        with _lock:  # try again next time, unless newer ones came meanwhile
            for pk, moment in tokens.items():
                _tokens.setdefault(pk, moment)
            for pk, moment in sessions.items():
                _sessions.setdefault(pk, moment)
        return 0
    return len(tokens) + len(sessions)


def _interval() -> float:
    try:
        return float(mcp_settings.WRITE_BEHIND_INTERVAL_SECONDS)
    except Exception:  # settings being changed or invalid: the writer keeps going with the default
        return float(AppSettings.WRITE_BEHIND_INTERVAL_SECONDS)


def _run() -> None:
    """The writer thread: never ends, whatever one flush meets."""
    while True:
        _wake.wait(_interval())
        _wake.clear()
        try:
            flush()
        except Exception:
            log_failure(logger, "write-behind flush failed")
        finally:
            connections.close_all()  # this thread's connections only


def _start() -> None:
    global _thread
    if _thread is not None:
        return
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_run, name="mcp-write-behind", daemon=True)
            _thread.start()


@atexit.register
def _flush_at_exit() -> None:
    if pending():
        try:
            flush()
        except Exception:
            logger.exception("could not write last-used stamps at exit")
