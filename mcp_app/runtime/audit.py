"""Recording ``tools/call`` requests in the audit log without putting the database on the request path.

``request_audit(...)`` builds the ``CallAudit`` port a ``RequestContext`` carries; it only appends to this
process's buffer (``audit_log``), which a daemon thread writes every ``AUDIT_FLUSH_INTERVAL_SECONDS`` and at exit,
keeping rows whose server or agent is gone (foreign key cleared), dropping a deleted tenant's. docs/audit.md.
The same thread flushes the buffers of its companions (``also_flush``: the usage ledger) in each cycle and at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from django.db import DatabaseError, close_old_connections, connection

from ..conf import mcp_settings, pace
from ..database import log_failure
from ..models import Agent, McpServer, Tenant
from ..models.audit import ToolCall as ToolCallRecord
from ..protocol.ports import NO_AUDIT, CallAudit
from .audit_entries import Caller, PendingCall, arguments_digest, outcome_status, redact, upstream_of

logger = logging.getLogger("mcp_app.audit")


class Companion(Protocol):
    """Another buffer written by the audit flusher's thread, after the audit log, in each cycle and at exit."""

    def flush(self) -> int:
        """Write what is buffered (must not raise a database error: keep it for the next cycle); rows written."""

    def clear(self) -> None:
        """Forget everything buffered (tests, with the audit log's ``clear``)."""


class AuditLog:
    """The per-process buffer and its flusher thread."""

    def __init__(self) -> None:
        self._pending: deque[PendingCall] = deque()
        self._retry: list[tuple[dict[str, Any], int]] = []  # prepared rows and how many flushes they failed
        self._lock = threading.Lock()  # one flush at a time
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._failing = False
        self._overflowing = False
        self.autostart = True  # tests flush by hand
        self.dropped = 0  # records lost to overflow or exhausted retries since start
        self.written = 0
        self.last_lag_seconds: float | None = None  # how long the oldest row of the last flush waited
        self.flushed = threading.Condition()
        self._companions: list[Companion] = []

    def also_flush(self, companion: Companion) -> None:
        """Flush ``companion`` in this thread's cycles and at exit too (idempotent)."""
        if companion not in self._companions:
            self._companions.append(companion)

    def ensure_running(self) -> None:
        """Start the flusher thread unless it runs (or tests flush by hand): a companion's first record."""
        if self._thread is None and self.autostart:
            try:
                self.start()
            except RuntimeError:
                logger.warning("audit flusher could not start; records stay buffered until the next flush")

    def append(self, call: PendingCall) -> None:
        """Buffer one record (the request path): constant time, no I/O; never raises."""
        if len(self._pending) + len(self._retry) >= mcp_settings.AUDIT_BUFFER_SIZE:
            self.dropped += 1
            if not self._overflowing:
                self._overflowing = True
                logger.error("audit buffer full (%s records): dropping new tool-call records", len(self._pending))
            return
        self._pending.append(call)
        # No new threads at interpreter shutdown, e.g.: then stop() flushes what is here.
        self.ensure_running()

    def start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            self._stopping = False
            thread = threading.Thread(target=self._run, name="mcp-audit-flusher", daemon=True)
            thread.start()
            self._thread = thread
        atexit.register(self.stop)

    def _after_fork(self) -> None:
        """A forked child (prefork servers, Celery) has no flusher thread: start its own on its first record.
        What the parent had buffered is the parent's to write."""
        self._pending = deque()
        self._retry = []
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._thread = None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the flusher and write what is left (called at interpreter exit)."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None
        self.flush()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(pace("AUDIT_FLUSH_INTERVAL_SECONDS", 1.0))
            self._wake.clear()
            if self._stopping:
                break
            try:
                close_old_connections()
                self.flush()
            except Exception:  # never let the thread die: the next tick retries
                log_failure(logger, "audit flusher failed")
        connection.close()

    def pending(self) -> int:
        return len(self._pending) + len(self._retry)

    def wait_written(self, count: int, timeout: float) -> bool:
        """Block until ``count`` rows have been written since start, for at most ``timeout`` seconds (on the flush's
        notification, not by polling); return whether they were."""
        deadline = time.monotonic() + timeout
        with self.flushed:
            while self.written < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.flushed.wait(remaining)
        return True

    def flush(self) -> int:
        """Write everything buffered, then the companions' buffers; returns how many audit rows were written. Safe
        to call from any thread."""
        with self._lock:
            written = self._flush_locked()
        with self.flushed:
            self.flushed.notify_all()
        for companion in tuple(self._companions):
            try:
                companion.flush()
            except Exception:  # one buffer's failure never stops the others
                log_failure(logger, "a buffer flushed with the audit log failed")
        return written

    def _flush_locked(self) -> int:
        taken = [self._pending.popleft() for _ in range(len(self._pending))]  # what is here now; appends go on
        oldest = min((call.appended for call in taken), default=None)
        pattern = re.compile(mcp_settings.AUDIT_REDACT_KEYS, re.IGNORECASE)  # once per flush, not per row
        rows = [*self._retry, *((self._prepare(call, pattern), 0) for call in taken)]
        self._retry = []
        if not rows:
            return 0
        written = 0
        batch_size = mcp_settings.AUDIT_BATCH_SIZE
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            try:
                written += self._insert([row for row, _attempts in batch])
            except DatabaseError as exc:
                self._failed(batch, exc)
                if not connection.in_atomic_block:
                    connection.close()  # reconnect on the next attempt
        if written:
            self.written += written
            if oldest is not None:
                self.last_lag_seconds = time.monotonic() - oldest
            if self._failing and not self._retry:
                self._failing = False
                logger.warning("audit log writes recovered")
        if self._overflowing and self.pending() < mcp_settings.AUDIT_BUFFER_SIZE // 2:
            self._overflowing = False
        return written

    def _insert(self, rows: list[dict[str, Any]]) -> int:
        # A tenant, server or agent may have gone away between the call and the flush: keep what can be kept
        # (three indexed lookups per batch, off the path). A deletion racing this check fails the batch, which
        # is then retried and checked again.
        tenants = set(Tenant.objects.filter(pk__in={row["tenant_id"] for row in rows}).values_list("pk", flat=True))
        servers = set(McpServer.objects.filter(pk__in={row["server_id"] for row in rows}).values_list("pk", flat=True))
        agents = set(Agent.objects.filter(pk__in={row["agent_id"] for row in rows}).values_list("pk", flat=True))
        kept = []
        for row in rows:
            if row["tenant_id"] not in tenants:
                continue
            if row["server_id"] not in servers:
                row["server_id"] = None
            if row["agent_id"] not in agents:
                row["agent_id"] = None
            kept.append(row)
        self.dropped += len(rows) - len(kept)
        if kept:
            ToolCallRecord.objects.insert_rows(kept)
        return len(kept)

    def _failed(self, batch: list[tuple[dict[str, Any], int]], exc: Exception) -> None:
        if not self._failing:
            self._failing = True
            logger.warning("audit log write failed (%s); retrying on the next flush", type(exc).__name__)
        limit = mcp_settings.AUDIT_FLUSH_RETRIES
        keep = [(row, attempts + 1) for row, attempts in batch if attempts + 1 < limit]
        lost = len(batch) - len(keep)
        if lost:
            self.dropped += lost
            logger.error("audit log: dropped %s tool-call record(s) after %s failed writes", lost, limit)
        self._retry.extend(keep)

    def _prepare(self, call: PendingCall, pattern: re.Pattern[str]) -> dict[str, Any]:
        caller = call.caller
        try:
            digest = arguments_digest(call.arguments)
        except TypeError:
            digest = ""
        return dict(
            tenant_id=caller.tenant_id,
            server_id=caller.server_pk,
            agent_id=caller.agent_pk,
            server_key=caller.server_key[:63],
            agent_key=caller.agent_key[:63],
            token_prefix=caller.token_prefix[:16],
            tool_name=call.tool_name[:128],
            arguments_digest=digest,
            arguments=redact(call.arguments, pattern, mcp_settings.AUDIT_MAX_VALUE_CHARS, mcp_settings.AUDIT_MAX_ITEMS),
            status=call.status,
            error_code=call.error_code,
            error_message=call.error_message[:500],
            started_at=datetime.fromtimestamp(call.started, UTC),
            finished_at=datetime.fromtimestamp(call.finished, UTC),
            duration_ms=max(0.0, (call.finished - call.started) * 1000.0),
            era=caller.era,
            protocol_version=caller.protocol_version,
            request_id=call.request_id[:200],
            task_id=call.task_id[:64],
            upstream=call.upstream[:64],
            upstream_ms=call.upstream_ms,
        )

    def clear(self) -> None:
        """Forget everything buffered (tests)."""
        with self._lock:
            self._pending.clear()
            self._retry = []
            self._failing = self._overflowing = False
            self.dropped = self.written = 0
            self.last_lag_seconds = None
        for companion in tuple(self._companions):
            companion.clear()


audit_log = AuditLog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=audit_log._after_fork)


class RequestAudit:
    """The ``CallAudit`` port of one request: stamps calls with the caller and hands them to ``audit_log``."""

    __slots__ = ("_caller", "_log")

    def __init__(self, caller: Caller, log: AuditLog) -> None:
        self._caller = caller
        self._log = log

    def record_call(
        self,
        params: Mapping[str, Any],
        request_id: str | int,
        started: float,
        *,
        result: Mapping[str, Any] | None = None,
        error_code: int | None = None,
        error_message: str = "",
        cancelled: bool = False,
    ) -> None:
        name = params.get("name")
        status, task_id = outcome_status(result, error_code, cancelled)
        upstream, upstream_ms = upstream_of(result)
        self._log.append(
            PendingCall(
                caller=self._caller,
                tool_name=name if isinstance(name, str) else "",
                arguments=params.get("arguments") if params.get("arguments") is not None else {},
                request_id=str(request_id),
                status=status,
                error_code=error_code,
                error_message=error_message,
                started=started,
                finished=time.time(),
                task_id=task_id,
                appended=time.monotonic(),
                upstream=upstream,
                upstream_ms=upstream_ms,
            )
        )


def request_audit(server: Any, token: Any, era: str, protocol_version: str) -> CallAudit:
    """The audit port for one request of ``token`` (the request path's cached ``TokenEntry``) on ``server`` (its
    ``ServerEntry``), or ``NO_AUDIT`` when auditing is off. Reads only the snapshots' attributes: no query."""
    if not mcp_settings.AUDIT_ENABLED:
        return NO_AUDIT
    caller = Caller(
        tenant_id=server.tenant_id,
        server_pk=server.pk,
        server_key=server.server_id,
        agent_pk=token.agent_pk,
        agent_key=token.agent_id,
        token_prefix=token.prefix,
        era=era,
        protocol_version=protocol_version,
    )
    return RequestAudit(caller, audit_log)
