"""The usage ledger's buffer and writer (docs/budgets.md, "The usage ledger").

``ledger`` listens to ``usage.on_spent`` (``install``, at app start: serving processes and Celery workers alike):
each call's usage is added in this process's memory to its row (tenant, agent, server, tool, the tenant's day).
The audit flusher's thread (``runtime.audit``, ``also_flush``) writes the rows every
``AUDIT_FLUSH_INTERVAL_SECONDS`` and at exit, in one transaction: one ``INSERT ... ON CONFLICT DO UPDATE`` that
adds to the stored row, executed for every row at once (PostgreSQL and SQLite). A failed write keeps the rows
for the next flush (adding is exact, so nothing counts twice: the transaction rolled back). A deleted tenant's
rows are dropped; a deleted agent's or server's keep their keys, their foreign key empty. What a crash loses: the
rows buffered since the last flush, at most one interval of this process's usage. Not here: budgets.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Field

from ..conf import mcp_settings
from ..models import Agent, McpServer, Tenant, UsageDay
from ..runtime.audit import audit_log
from .metering import count_in_metrics
from .usage import Spent, on_spent

logger = logging.getLogger("mcp_app.limits.usage")

Key = tuple[int, str, str, str, date]  # tenant pk, agent key, server key, tool name, day: UsageDay's unique key

COLUMNS = (
    "tenant_id",
    "agent_id",
    "server_id",
    "agent_key",
    "server_key",
    "tool_name",
    "day",
    *UsageDay.AMOUNTS,
)
ADDED = UsageDay.AMOUNTS


@dataclass(slots=True)
class Totals:
    """What one ledger row gained since the last flush."""

    agent_pk: int | None
    server_pk: int | None
    calls: int = 0
    errors: int = 0
    tool_seconds: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0
    cost: Decimal = Decimal(0)

    def add(self, other: Totals | Spent) -> None:
        self.calls += other.calls
        self.errors += other.errors
        self.tool_seconds += other.tool_seconds
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out
        self.cost += other.cost
        # The newest row behind a key wins (an agent deleted and made again under the same id).
        self.agent_pk = other.agent_pk if other.agent_pk is not None else self.agent_pk
        self.server_pk = other.server_pk if other.server_pk is not None else self.server_pk


def upsert_sql() -> str:
    """The statement that adds one row to the ledger (its row made if new), for this connection's database."""
    quote = connection.ops.quote_name
    table = quote(UsageDay._meta.db_table)
    conflict = ", ".join(quote(name) for name in ("tenant_id", "day", "agent_key", "server_key", "tool_name"))
    added = ", ".join(f"{quote(name)} = {table}.{quote(name)} + excluded.{quote(name)}" for name in ADDED)
    keys = ", ".join(
        f"{quote(name)} = COALESCE(excluded.{quote(name)}, {table}.{quote(name)})" for name in ("agent_id", "server_id")
    )
    # Identifiers from the model's meta, quoted by the backend; every value is a parameter.
    return (
        f"INSERT INTO {table} ({', '.join(quote(name) for name in COLUMNS)}) "  # noqa: S608
        f"VALUES ({', '.join(['%s'] * len(COLUMNS))}) "
        f"ON CONFLICT ({conflict}) DO UPDATE SET {added}, {keys}"
    )


def known(pks: Iterable[int | None]) -> set[int]:
    return {pk for pk in pks if pk is not None}


def column(name: str) -> Field[Any, Any]:
    field = UsageDay._meta.get_field(name.removesuffix("_id"))
    assert isinstance(field, Field)
    return field


class Ledger:
    """This process's usage not written yet, and its writer (see the module docstring)."""

    def __init__(self) -> None:
        self._rows: dict[Key, Totals] = {}
        self._lock = threading.Lock()  # the buffer
        self._flush_lock = threading.Lock()  # one flush at a time
        self._overflowing = False
        self._failing = False
        self.dropped = 0  # calls lost to a full buffer or a deleted tenant since start
        self.written = 0  # rows written (added to) since start

    def add(self, usage: Spent) -> None:
        """The ``on_spent`` listener: constant time, no I/O."""
        key = (usage.tenant_pk, usage.agent_key[:63], usage.server_key[:63], usage.tool_name[:128], usage.day)
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                if len(self._rows) >= mcp_settings.USAGE_BUFFER_SIZE:
                    self._overflow(usage.calls)
                    return
                row = self._rows[key] = Totals(usage.agent_pk, usage.server_pk)
            row.add(usage)
        audit_log.ensure_running()

    def _overflow(self, calls: int) -> None:
        self.dropped += calls
        if not self._overflowing:
            self._overflowing = True
            logger.error("usage ledger buffer full (%s rows): dropping the usage of new rows", len(self._rows))

    def pending(self) -> int:
        """Rows buffered, not written yet."""
        return len(self._rows)

    def flush(self) -> int:
        """Write what is buffered (see the module docstring); returns the rows written. Any thread."""
        with self._flush_lock:
            with self._lock:
                taken, self._rows = self._rows, {}
                self._overflowing = False
            if not taken:
                return 0
            try:
                written = self._write(taken)
            except DatabaseError as exc:
                self._keep(taken)
                if not self._failing:
                    self._failing = True
                    logger.warning("usage ledger write failed (%s); retrying on the next flush", type(exc).__name__)
                if not connection.in_atomic_block:
                    connection.close()  # reconnect on the next attempt
                return 0
            if self._failing:
                self._failing = False
                logger.warning("usage ledger writes recovered")
            self.written += written
            return written

    def _keep(self, taken: dict[Key, Totals]) -> None:
        """Put rows that could not be written back (added to what came meanwhile)."""
        with self._lock:
            for key, totals in taken.items():
                row = self._rows.get(key)
                if row is None:
                    self._rows[key] = totals
                else:
                    row.add(totals)

    def _write(self, taken: dict[Key, Totals]) -> int:
        # A tenant, agent or server may have gone since the call: three indexed lookups per flush, off the path.
        # A deletion racing them fails the transaction, and the next flush looks again.
        tenants = set(Tenant.objects.filter(pk__in={key[0] for key in taken}).values_list("pk", flat=True))
        agents = set(
            Agent.objects.filter(pk__in=known(row.agent_pk for row in taken.values())).values_list("pk", flat=True)
        )
        servers = set(
            McpServer.objects.filter(pk__in=known(row.server_pk for row in taken.values())).values_list("pk", flat=True)
        )
        fields = [column(name) for name in COLUMNS]
        params: list[list[Any]] = []
        gone = 0  # calls of deleted tenants: counted as dropped once the rest is written
        for (tenant_pk, agent_key, server_key, tool_name, day), row in taken.items():
            if tenant_pk not in tenants:
                gone += row.calls
                continue
            values = (
                tenant_pk,
                row.agent_pk if row.agent_pk in agents else None,
                row.server_pk if row.server_pk in servers else None,
                agent_key,
                server_key,
                tool_name,
                day,
                row.calls,
                row.errors,
                row.tool_seconds,
                row.bytes_in,
                row.bytes_out,
                row.cost,
            )
            # Each value adapted by its own field, as the ORM would (dates and decimals differ by database).
            params.append(
                [field.get_db_prep_save(value, connection) for field, value in zip(fields, values, strict=True)]
            )
        if params:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.executemany(upsert_sql(), params)
        self.dropped += gone
        return len(params)

    def clear(self) -> None:
        """Forget everything buffered (tests)."""
        with self._lock:
            self._rows = {}
            self._overflowing = self._failing = False
            self.dropped = self.written = 0

    def _after_fork(self) -> None:
        """A forked child (Celery's prefork pool) starts empty: what the parent buffered is the parent's to write."""
        self._rows = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()


ledger = Ledger()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=ledger._after_fork)


def install() -> None:
    """Listen to every call's usage in this process and write it with the audit log's flusher (idempotent)."""
    on_spent(ledger.add)
    on_spent(count_in_metrics)
    audit_log.also_flush(ledger)
