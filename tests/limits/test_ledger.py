"""The usage ledger's buffer and writer: usage is added in memory per (tenant, agent, server, tool, day) and added
to the stored rows by one upsert per flush; a deleted tenant's usage is dropped, a deleted agent's or server's kept
under its keys; the audit flusher's thread writes it within its interval; a failed write loses nothing."""

from __future__ import annotations

import math
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from mcp_app.limits import usage
from mcp_app.limits.ledger import ledger
from mcp_app.limits.metering import reported_cost
from mcp_app.models import UsageDay
from mcp_app.runtime.audit import audit_log
from tests.helpers import wait_until_blocking

DAY = date(2026, 12, 5)


def spent(access: Any, tool: str = "echo", day: date = DAY, **fields: Any) -> usage.Spent:
    values: dict[str, Any] = {
        "errors": 0,
        "tool_seconds": 0.5,
        "bytes_in": 10,
        "bytes_out": 20,
        "cost": Decimal("0.25"),
        **fields,
    }
    return usage.Spent(
        tenant_pk=access.tenant.pk,
        agent_pk=access.agent.pk,
        server_pk=access.server.pk,
        agent_key=access.agent.agent_id,
        server_key=access.server.server_id,
        tool_name=tool,
        day=day,
        tenant_slug=access.tenant.slug,
        **values,
    )


@pytest.fixture
def access(transactional_db: Any, access_factory: Any) -> Any:
    return access_factory(tools=())


def test_usage_is_summed_in_memory_and_added_to_the_stored_rows(access, django_assert_max_num_queries):
    for _ in range(3):
        usage.spent(spent(access))
    usage.spent(spent(access, errors=1, tool_seconds=1.5, cost=Decimal("1")))
    usage.spent(spent(access, day=date(2026, 12, 6)))
    assert ledger.pending() == 2  # two rows: two days
    # Three lookups (tenants, agents, servers) and one upsert for every row, in one transaction.
    with django_assert_max_num_queries(6):
        assert ledger.flush() == 2
    row = UsageDay.objects.get(day=DAY)
    assert (row.calls, row.errors, row.bytes_in, row.bytes_out) == (4, 1, 40, 80)
    assert row.tool_seconds == pytest.approx(3.0)
    assert row.cost == Decimal("1.75")
    usage.spent(spent(access, cost=Decimal("0.000001")))
    assert ledger.flush() == 1
    row.refresh_from_db()
    assert (row.calls, row.cost) == (5, Decimal("1.750001"))
    assert UsageDay.objects.count() == 2


def test_a_deleted_agent_or_server_keeps_its_usage_under_its_keys(access):
    usage.spent(spent(access))
    agent_id, server_id = access.agent.agent_id, access.server.server_id
    access.agent.delete()
    access.server.delete()
    assert ledger.flush() == 1
    row = UsageDay.objects.get()
    assert (row.agent_id, row.server_id, row.agent_key, row.server_key, row.calls) == (
        None,
        None,
        agent_id,
        server_id,
        1,
    )


def test_a_deleted_tenants_buffered_usage_is_dropped(access, access_factory):
    other = access_factory(tools=())
    usage.spent(spent(access))
    usage.spent(spent(other))
    access.tenant.delete()
    assert ledger.flush() == 1
    assert list(UsageDay.objects.values_list("tenant_id", flat=True)) == [other.tenant.pk]
    assert ledger.dropped == 1


def test_a_failed_write_keeps_the_usage_for_the_next_flush(access):
    usage.spent(spent(access))
    with connection.cursor() as cursor:  # the table is away: the write fails, as in an outage
        cursor.execute(f"ALTER TABLE {UsageDay._meta.db_table} RENAME TO mcp_usage_away")
    try:
        assert ledger.flush() == 0
        usage.spent(spent(access))  # more usage of the same row meanwhile
        assert ledger.pending() == 1
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE mcp_usage_away RENAME TO {UsageDay._meta.db_table}")
    assert ledger.flush() == 1
    assert UsageDay.objects.get().calls == 2


def test_a_full_buffer_drops_new_rows_not_the_usage_of_known_ones(access, settings):
    settings.MCP_APP = {**settings.MCP_APP, "USAGE_BUFFER_SIZE": 1}
    usage.spent(spent(access, tool="a"))
    usage.spent(spent(access, tool="b"))  # a second row: no room
    usage.spent(spent(access, tool="a"))
    assert ledger.pending() == 1 and ledger.dropped == 1
    ledger.flush()
    assert list(UsageDay.objects.values_list("tool_name", "calls")) == [("a", 2)]


def test_the_audit_flusher_thread_writes_the_ledger_within_its_interval(access):
    audit_log.autostart = True
    try:
        usage.spent(spent(access))  # starts the flusher, as a worker's first call does
        wait_until_blocking(lambda: ledger.written >= 1, timeout=5, what="the ledger flushed by the audit thread")
    finally:
        audit_log.stop()
        audit_log.autostart = False
    assert UsageDay.objects.get().calls == 1


def test_a_reported_cost_must_be_a_finite_number_at_least_zero():
    assert reported_cost({"_meta": {"io.mcp-host/cost": 0.1}}) == Decimal("0.1")
    assert reported_cost({"_meta": {"io.mcp-host/cost": 3}}) == Decimal(3)
    for bad in (math.inf, math.nan, -0.5, "1", None, True):
        assert reported_cost({"_meta": {"io.mcp-host/cost": bad}}) == 0
    assert reported_cost({"_meta": "x"}) == reported_cost(None) == reported_cost({}) == 0
