"""``ToolCall.objects``: usage figures computed by the database (PostgreSQL's percentile_cont, or the same
interpolation with window functions on SQLite) and retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_app.models import ToolCall

DAY1 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
DAY2 = datetime(2026, 3, 2, 23, 30, tzinfo=UTC)


def record(
    access: Any, tool: str, started: datetime, duration_ms: float, status: str = "ok", tenant: Any = None
) -> None:
    ToolCall.objects.create(
        tenant=tenant or access.tenant,
        server=access.server if tenant is None else None,
        agent=access.agent if tenant is None else None,
        server_key="s",
        agent_key="a",
        tool_name=tool,
        arguments_digest="",
        status=status,
        started_at=started,
        finished_at=started + timedelta(milliseconds=duration_ms),
        duration_ms=duration_ms,
        era="legacy",
        protocol_version="2025-11-25",
    )


@pytest.fixture
def calls(db: Any, access_factory: Any, tenant_factory: Any) -> Any:
    access = access_factory(tools=())
    # search: durations 1..10 ms on day 1, two of them errors; fetch: a single 42 ms call on day 2.
    for duration in range(1, 11):
        status = {3: "error", 7: "tool_error"}.get(duration, "ok")
        record(access, "search", DAY1 + timedelta(minutes=duration), float(duration), status)
    record(access, "fetch", DAY2, 42.0)
    record(access, "search", DAY2 + timedelta(hours=1), 1000.0)  # day 3 UTC: outside the window below
    record(access, "search", DAY1, 5000.0, tenant=tenant_factory())  # another tenant: never counted
    return access


def test_usage_per_day_and_per_tool(calls: Any) -> None:
    usage = ToolCall.objects.usage(calls.tenant.pk, DAY1 - timedelta(hours=1), DAY2 + timedelta(minutes=1))
    assert [(day.day.isoformat(), day.calls, day.errors) for day in usage.days] == [
        ("2026-03-01", 10, 2),
        ("2026-03-02", 1, 0),
    ]
    search, fetch = usage.tools
    assert (search.tool_name, search.calls, search.errors) == ("search", 10, 2)
    assert search.error_rate == pytest.approx(0.2)
    # percentile_cont: p50 of 1..10 is halfway between 5 and 6; p95 sits at 0.95 * 9 = 8.55 -> 9 + 0.55 * (10 - 9).
    assert search.p50_ms == pytest.approx(5.5)
    assert search.p95_ms == pytest.approx(9.55)
    assert (fetch.tool_name, fetch.calls, fetch.errors, fetch.p50_ms, fetch.p95_ms) == ("fetch", 1, 0, 42.0, 42.0)


def test_usage_of_a_tenant_without_calls_is_empty(calls: Any, tenant_factory: Any) -> None:
    usage = ToolCall.objects.usage(tenant_factory().pk, DAY1 - timedelta(days=1), DAY2)
    assert usage.days == () and usage.tools == ()


def test_delete_expired_applies_the_retention(calls: Any) -> None:
    now = DAY2 + timedelta(days=10)
    assert ToolCall.objects.filter(started_at__lt=now - timedelta(days=10)).count() == 11  # day 1's ten, the other's
    assert ToolCall.objects.delete_expired(10, now=now) == 11
    assert sorted(ToolCall.objects.values_list("tool_name", flat=True)) == ["fetch", "search"]
