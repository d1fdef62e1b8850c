"""The audit log: one ``ToolCall`` row per ``tools/call`` request, and the usage figures computed from it.

Rows are written in batches, off the request path, by ``mcp_app.runtime.audit``; they keep a copy of the
identifying strings and only a keyed digest plus a redacted, bounded copy of the arguments (docs/audit.md).
``ToolCall.objects.usage(tenant, since)`` computes calls per day and per-tool error rate and p50/p95 duration
in the database (``percentile_cont`` on PostgreSQL, the same interpolation with window functions elsewhere);
``delete_expired`` applies the retention setting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection, connections, models, transaction
from django.db.models.signals import pre_delete
from django.utils import timezone

from . import statements
from .agents import Agent
from .servers import McpServer
from .tenancy import Tenant


@dataclass(frozen=True, slots=True)
class DailyUsage:
    day: date
    calls: int
    errors: int


@dataclass(frozen=True, slots=True)
class ToolUsage:
    tool_name: str
    calls: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0


@dataclass(frozen=True, slots=True)
class Usage:
    days: tuple[DailyUsage, ...]
    tools: tuple[ToolUsage, ...]

    def every_day(self, since: datetime, until: datetime) -> tuple[DailyUsage, ...]:
        """One entry per UTC day of ``[since, until]``, oldest first, days without calls as zeros: what a chart of
        the period draws (``days`` holds only the days that had calls)."""
        had = {day.day: day for day in self.days}
        first, last = _utc_day(since), _utc_day(until)
        count = (last - first).days + 1
        return tuple(
            had.get(day, DailyUsage(day=day, calls=0, errors=0))
            for day in (first + timedelta(days=offset) for offset in range(max(count, 0)))
        )


def _utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date() if timezone.is_aware(moment) else moment.date()


# Statuses counted as errors in usage figures (a protocol error, a tool's isError result, a timeout).
ERROR_STATUSES = ("error", "tool_error", "timeout")


class ToolCallManager(models.Manager["ToolCall"]):
    def insert_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write audit rows given as ``{attname: value}`` with ``statements.insert_many`` (one ``COPY`` on PostgreSQL,
        one ``executemany`` elsewhere): no model instances and no SQL compiled per batch, as ``bulk_create`` would
        (docs/performance.md)."""
        statements.insert_many(self.model, rows, using=self.db)

    def delete_expired(self, retention_days: int, now: datetime | None = None) -> int:
        """Delete calls that started more than ``retention_days`` ago; returns how many rows went."""
        cutoff = (now or timezone.now()) - timedelta(days=retention_days)
        count, _ = self.filter(started_at__lt=cutoff).delete()
        return count

    def usage(self, tenant_id: int | Sequence[int] | None, since: datetime, until: datetime | None = None) -> Usage:
        """Calls per day and per-tool figures of the calls started in ``[since, until)`` of one tenant, of several
        (a sequence of ids: a member's tenants) or of all (``None``: the operator's view)."""
        until = until or timezone.now()
        if tenant_id is not None and not isinstance(tenant_id, int):
            ids = [int(pk) for pk in tenant_id]
            if not ids:
                return Usage(days=(), tools=())
            tenant_sql, tenant_params = f"IN ({', '.join(['%s'] * len(ids))})", ids
        elif tenant_id is None:
            tenant_sql, tenant_params = "IS NOT NULL", []
        else:
            tenant_sql, tenant_params = "= %s", [tenant_id]
        table = connection.ops.quote_name(self.model._meta.db_table)
        ops = connection.ops
        params = [*tenant_params, ops.adapt_datetimefield_value(since), ops.adapt_datetimefield_value(until)]
        where = f"tenant_id {tenant_sql} AND started_at >= %s AND started_at < %s"
        errors = ", ".join(f"'{status}'" for status in ERROR_STATUSES)
        if connection.vendor == "postgresql":
            # Days: one index-only range scan per day (the planner cannot see that the day of started_at follows
            # the index order, and would sort every row); tools: one index-only scan in (tool, time) order, both
            # percentiles from one sort per tool. JIT is off: its compile time exceeded the query's own.
            day_sql = (
                "SELECT d.day::date, COUNT(c.started_at), "  # noqa: S608 (no user input)
                f"COUNT(c.started_at) FILTER (WHERE c.status IN ({errors})) "
                "FROM generate_series(date_trunc('day', %s AT TIME ZONE 'UTC'), %s AT TIME ZONE 'UTC', "
                "interval '1 day') AS d(day) "
                f"JOIN {table} c ON c.tenant_id {tenant_sql} "
                "AND c.started_at >= GREATEST(d.day AT TIME ZONE 'UTC', %s) "
                "AND c.started_at < LEAST((d.day + interval '1 day') AT TIME ZONE 'UTC', %s) "
                "GROUP BY d.day ORDER BY d.day"
            )
            since_param, until_param = params[-2], params[-1]
            day_params = [since_param, until_param, *tenant_params, since_param, until_param]
            tool_sql = (
                f"SELECT tool_name, COUNT(*), COUNT(*) FILTER (WHERE status IN ({errors})), "  # noqa: S608
                "percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY duration_ms) "
                f"FROM {table} WHERE {where} GROUP BY tool_name ORDER BY COUNT(*) DESC, tool_name"
            )
            tool_params = params
        else:
            day_sql = (
                f"SELECT date(started_at) AS day, COUNT(*), "  # noqa: S608 (no user input)
                f"SUM(CASE WHEN status IN ({errors}) THEN 1 ELSE 0 END) FROM {table} WHERE {where} "
                "GROUP BY 1 ORDER BY 1"
            )
            day_params = params
            tool_sql = _interpolated_percentiles_sql(table, where, errors)
            tool_params = params * 2  # the range is used twice
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET LOCAL jit = off")
            cursor.execute(day_sql, day_params)
            days = tuple(
                DailyUsage(day=_as_date(day), calls=int(calls), errors=int(errors or 0))
                for day, calls, errors in cursor.fetchall()
                if calls
            )
            cursor.execute(tool_sql, tool_params)
            tools = tuple(_tool_usage(*row) for row in cursor.fetchall())
        return Usage(days=days, tools=tools)


def _tool_usage(name: str, calls: int, errors: int | None, *percentiles: Any) -> ToolUsage:
    """A row of either query (PostgreSQL returns the p50 and p95 as one array)."""
    p50, p95 = (percentiles[0] or (None, None)) if len(percentiles) == 1 else percentiles
    return ToolUsage(
        name, int(calls), int(errors or 0), None if p50 is None else float(p50), None if p95 is None else float(p95)
    )


def _as_date(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def _interpolated_percentiles_sql(table: str, where: str, errors: str) -> str:
    """percentile_cont for databases without it: rank each tool's durations, then interpolate linearly between
    the two ranks around ``p * (n - 1)``, exactly as PostgreSQL does."""

    def percentile(p: float) -> str:
        position = f"({p} * (n - 1))"
        lower = f"CAST({position} AS INTEGER)"
        return (
            f"(SELECT MAX(CASE WHEN r.rn = {lower} + 1 THEN r.duration_ms END) + ({position} - {lower}) * "  # noqa: S608
            f"(COALESCE(MAX(CASE WHEN r.rn = {lower} + 2 THEN r.duration_ms END), "
            f"MAX(CASE WHEN r.rn = {lower} + 1 THEN r.duration_ms END)) "
            f"- MAX(CASE WHEN r.rn = {lower} + 1 THEN r.duration_ms END)) "
            "FROM ranked r WHERE r.tool_name = t.tool_name)"
        )

    return (
        "WITH ranked AS ("  # noqa: S608 (no user input)
        "SELECT tool_name, duration_ms, "
        "ROW_NUMBER() OVER (PARTITION BY tool_name ORDER BY duration_ms) AS rn "
        f"FROM {table} WHERE {where} AND duration_ms IS NOT NULL), "
        "totals AS (SELECT tool_name, COUNT(*) AS n FROM ranked GROUP BY tool_name), "
        "calls AS ("
        f"SELECT tool_name, COUNT(*) AS calls, SUM(CASE WHEN status IN ({errors}) THEN 1 ELSE 0 END) AS errors "
        f"FROM {table} WHERE {where} GROUP BY tool_name) "
        f"SELECT c.tool_name, c.calls, c.errors, {percentile(0.5)}, {percentile(0.95)} "
        "FROM calls c LEFT JOIN totals t ON t.tool_name = c.tool_name "
        "ORDER BY c.calls DESC, c.tool_name"
    )


class ToolCall(models.Model):
    """One ``tools/call`` request as it was answered."""

    # When it ran, in which era and protocol version, and the ids that find it again (shown by the admin and API).
    RUN_FIELDS = ("started_at", "finished_at", "duration_ms", "era", "protocol_version", "request_id", "task_id")

    class Status(models.TextChoices):
        OK = "ok", "OK"
        TOOL_ERROR = "tool_error", "Tool error (isError result)"
        ERROR = "error", "Protocol error (JSON-RPC error)"
        CANCELLED = "cancelled", "Cancelled"
        TASK = "task", "Became a task"
        INPUT_REQUIRED = "input_required", "Input required"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tool_calls", verbose_name="tenant")
    server = models.ForeignKey(
        McpServer, on_delete=models.SET_NULL, null=True, related_name="tool_calls", verbose_name="server"
    )
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, related_name="tool_calls", verbose_name="agent"
    )
    server_key = models.CharField("server id", max_length=63, help_text="The server's id at the time of the call.")
    agent_key = models.CharField("agent id", max_length=63, help_text="The agent's id at the time of the call.")
    token_prefix = models.CharField("token prefix", max_length=16, blank=True)
    tool_name = models.CharField("tool", max_length=128)
    arguments_digest = models.CharField(
        "arguments digest",
        max_length=64,
        help_text="HMAC-SHA256 (keyed by the project's SECRET_KEY) of the canonical JSON of the full arguments.",
    )
    arguments = models.JSONField(
        "arguments (redacted)", default=dict, help_text="Secret-looking keys redacted, long values cut."
    )
    status = models.CharField("status", max_length=16, choices=Status.choices)
    error_code = models.IntegerField("JSON-RPC error code", null=True, blank=True)
    error_message = models.CharField("error message", max_length=500, blank=True)
    started_at = models.DateTimeField("started")
    finished_at = models.DateTimeField("finished")
    duration_ms = models.FloatField("duration (ms)")
    era = models.CharField("era", max_length=16)
    protocol_version = models.CharField("protocol version", max_length=16)
    request_id = models.CharField("JSON-RPC request id", max_length=200, blank=True)
    task_id = models.CharField("task id", max_length=64, blank=True, db_index=True, help_text="Its ToolTask, if any.")
    upstream = models.CharField(
        "upstream", max_length=64, blank=True, help_text="The upstream MCP server that answered, for upstream tools."
    )
    upstream_ms = models.FloatField("upstream time (ms)", null=True, blank=True, help_text="How long it took.")

    objects = ToolCallManager()

    class Meta:
        verbose_name = "tool call"
        verbose_name_plural = "tool calls"
        ordering = ("-started_at",)
        indexes = [
            # The audit list and every usage query (one tenant, a time range), covering (index-only scans:
            # docs/audit.md); key columns rather than INCLUDE, which SQLite lacks.
            models.Index(fields=("tenant", "started_at", "status"), name="mcp_toolcall_tenant_started"),
            models.Index(
                fields=("tenant", "tool_name", "started_at", "duration_ms", "status"), name="mcp_toolcall_tenant_tool"
            ),
            # Retention purges by age across tenants.
            models.Index(fields=("started_at",), name="mcp_toolcall_started"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} by {self.agent_key} on {self.server_key} ({self.status})"


def _lock_before_delete(sender: type[models.Model], instance: models.Model, using: str, **kwargs: Any) -> None:
    """A tenant, server or agent is locked first when it is deleted: ``pre_delete`` runs inside the deletion's
    transaction, before Django deletes or nulls the tool calls that reference it. An audit flush that inserts a
    call referencing it meanwhile then waits at its commit (its foreign-key check needs the row) and fails once
    the row is gone, to be retried without the reference (``runtime.audit``). Without the lock, a flush committed
    between the nulling and the row's deletion made the deletion itself fail on the foreign key."""
    if connections[using].features.has_select_for_update:
        list(sender._default_manager.using(using).select_for_update().filter(pk=instance.pk).values_list("pk"))


for _referenced in (Tenant, McpServer, Agent):
    pre_delete.connect(_lock_before_delete, sender=_referenced, dispatch_uid=f"mcp-audit-lock-{_referenced.__name__}")
