"""``ToolCall.objects``: usage figures computed by the database (PostgreSQL's percentile_cont, or the same
interpolation with window functions on SQLite) and retention."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcp_app.models import McpServer, ToolCall
from tests.conftest import REQUIRE_SERVICES

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


@pytest.mark.django_db(transaction=True)
def test_a_server_deleted_while_an_audit_flush_commits_a_call_of_it_is_deleted(access_factory: Any) -> None:
    """The race CI met: the audit flusher (another connection) commits a call of a server after Django has nulled
    that server's calls and before it deletes the row. The deletion succeeds; the flush waits for it, then fails
    on the foreign key (the audit writer retries such a batch without the server)."""
    from django.db import IntegrityError, connection, connections

    if connection.vendor != "postgresql":
        if REQUIRE_SERVICES:
            pytest.fail("MCP_REQUIRE_SERVICES=1 but the test database is not PostgreSQL")
        pytest.skip("row locks and deferred foreign keys: PostgreSQL")
    access = access_factory(tools=())
    flush_failed: list[Exception] = []

    def flush() -> None:
        try:
            record(access, "echo", DAY1, 1.0)
        except IntegrityError as error:
            flush_failed.append(error)
        finally:
            connections.close_all()

    flusher = threading.Thread(target=flush)

    def flusher_done_or_waiting(cursor: Any) -> bool:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return not flusher.is_alive() or cursor.fetchone()[0] > 0

    def flush_before_the_row_goes(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith('DELETE FROM "mcp_app_mcpserver"') and not flusher.is_alive() and not flusher.ident:
            flusher.start()
            with connection.cursor() as cursor:
                for _ in range(200):  # bounded: 10 s
                    if flusher_done_or_waiting(cursor):
                        break
                    flusher.join(0.05)
                else:
                    pytest.fail("the flush neither committed nor waited")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(flush_before_the_row_goes):
        access.server.delete()
    flusher.join(10)
    assert flusher.ident is not None and not flusher.is_alive()
    assert not McpServer.objects.filter(pk=access.server.pk).exists()
    assert len(flush_failed) == 1 and "mcp_app_mcpserver" in str(flush_failed[0])
    assert not ToolCall.objects.filter(tool_name="echo").exists()
