"""The usage ledger as an export (docs/budgets.md, "Managing budgets and reading usage"; docs/api.md): one record
per ``UsageDay`` row with a stable set of fields (``FIELDS``, the CSV header), the rows of a period, and CSV.

The API's ``GET /api/v1/usage/`` and ``manage.py mcp_usage export`` both read through here, so a row reads the
same in JSON and CSV, from the API and from the command line. Not here: who may read which tenant's rows (the
callers scope their querysets).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from datetime import date, timedelta
from typing import Any

from django.db.models import QuerySet

from ..models import UsageDay

#: The fields of one exported row, in order: the CSV header. Keys are the ids as the ledger kept them (a deleted
#: agent's or server's rows keep theirs); the cost is a decimal string with six places.
FIELDS = (
    "day",
    "tenant",
    "agent",
    "server",
    "tool",
    *UsageDay.AMOUNTS,
)
MONTH = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")


def month_days(value: str) -> tuple[date, date]:
    """The first and last day of the month ``YYYY-MM``; ``ValueError`` for anything else."""
    found = MONTH.fullmatch(value.strip())
    if found is None:
        raise ValueError(f"{value!r} is not a month: use YYYY-MM, e.g. 2026-12")
    first = date(int(found.group(1)), int(found.group(2)), 1)
    following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return first, following - timedelta(days=1)


def ordered(queryset: QuerySet[UsageDay]) -> QuerySet[UsageDay]:
    """Rows in a stable order (day, agent, server, tool, row), their tenant's slug loaded with them."""
    return queryset.select_related("tenant").order_by(
        "day", "tenant__slug", "agent_key", "server_key", "tool_name", "pk"
    )


def record(row: UsageDay) -> dict[str, Any]:
    """One row as exported (``FIELDS``)."""
    return {
        "day": row.day.isoformat(),
        "tenant": row.tenant.slug,
        "agent": row.agent_key,
        "server": row.server_key,
        "tool": row.tool_name,
        "calls": row.calls,
        "errors": row.errors,
        "tool_seconds": row.tool_seconds,
        "bytes_in": row.bytes_in,
        "bytes_out": row.bytes_out,
        "cost": f"{row.cost:.6f}",
    }


def csv_lines(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The header, then one CSV line per record (``\\r\\n`` line ends, RFC 4180)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, extrasaction="ignore")
    writer.writeheader()
    yield _take(buffer)
    for item in records:
        writer.writerow({key: _safe(value) for key, value in item.items()})
        yield _take(buffer)


def _take(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


def _safe(value: Any) -> Any:
    """A cell a spreadsheet will not run as a formula (agent, server and tool names are the tenant's own text)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
