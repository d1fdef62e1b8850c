"""The usage ledger at the wire: every tool call that runs is counted once, where it runs, whatever its outcome
(an ``isError`` result, a JSON-RPC error, a cancellation), with its tool-seconds, bytes and cost, on its tenant's
day; calls refused before running are not; and the ledger agrees with the audit log, call for call."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from prometheus_client import REGISTRY

from mcp_app.models import ToolCall, UsageDay
from mcp_app.protocol.errors import INVALID_PARAMS
from mcp_app.runtime.audit import audit_log
from tests.helpers import (
    DECLARING,
    call,
    communicator,
    error_of,
    modern_call_tool,
    result_of,
    rpc,
    settled,
    task,
)

COST = "io.mcp-host/cost"


def ledger() -> dict[str, UsageDay]:
    """Flush (the audit log's flush writes the ledger too) and read the ledger, by tool."""
    audit_log.flush()
    return {row.tool_name: row for row in UsageDay.objects.all()}


def size(value: Any) -> int:
    return len(orjson.dumps(value))


async def test_inline_calls_are_counted_once_whatever_their_outcome(make_access, orm, tool_factory):
    access = await make_access(tools=("echo", "boom", "refuse"))
    await orm(tool_factory, access.server, "failing", static_error={"code": -32050, "message": "upstream down"})
    echoed = [result_of(await modern_call_tool(access, "echo", {"text": text})) for text in ("a", "bb", "ccc")]
    assert result_of(await modern_call_tool(access, "boom", {}))["isError"] is True
    assert result_of(await modern_call_tool(access, "refuse", {"reason": "no"}))["isError"] is True
    assert (await modern_call_tool(access, "failing", {})).json()["error"]["code"] == -32050
    # Refused before running: an unknown tool, arguments against the schema. Not counted.
    error_of(await modern_call_tool(access, "nope", {}), 400, INVALID_PARAMS)
    error_of(await modern_call_tool(access, "echo", {"text": 3}), 400, INVALID_PARAMS)
    rows = await orm(ledger)
    assert set(rows) == {"echo", "boom", "refuse", "failing"}
    echo = rows["echo"]
    assert (echo.calls, echo.errors) == (3, 0)
    assert echo.bytes_in == sum(size({"text": text}) for text in ("a", "bb", "ccc"))
    # The result as the tool returned it, before the revision's envelope (resultType, _meta) is added.
    assert echo.bytes_out == sum(size({"content": result["content"]}) for result in echoed)
    assert echo.tool_seconds > 0
    assert echo.cost == Decimal(0)
    assert (echo.tenant_id, echo.agent_id, echo.server_id) == (access.tenant.pk, access.agent.pk, access.server.pk)
    assert (echo.agent_key, echo.server_key) == (access.agent.agent_id, access.server.server_id)
    assert echo.day == datetime.now(UTC).date()  # the tenant's zone: UTC by default
    assert [(rows[name].calls, rows[name].errors) for name in ("boom", "refuse", "failing")] == [(1, 1)] * 3
    assert rows["failing"].bytes_out == 0  # no result
    assert await orm(audit_log.flush) == 0 and await orm(UsageDay.objects.count) == 4  # written once


async def test_a_cancelled_call_counts_its_seconds_as_an_error(make_access, orm, fresh_gate):
    access = await make_access(tools=("wait_for_release",))
    comm = communicator(access, rpc("tools/call", {"name": "wait_for_release", "arguments": {}}))
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    await comm.send_input({"type": "http.disconnect"})
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await comm.wait(timeout=5)
    row = (await orm(ledger))["wait_for_release"]
    assert (row.calls, row.errors) == (1, 1)
    assert row.tool_seconds > 0


async def test_a_call_that_becomes_a_task_is_counted_once_by_the_run_of_its_tool(make_access, orm, fresh_gate):
    access = await make_access(tools=("gated_job",))
    created = result_of(await modern_call_tool(access, "gated_job", {}, capabilities=DECLARING))
    assert created["resultType"] == "task"
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    assert await orm(ledger) == {}  # still running: nothing counted yet
    result_of(await task(access, "tasks/cancel", created["taskId"]))
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await settled()
    row = (await orm(ledger))["gated_job"]
    assert (row.calls, row.errors) == (1, 1)  # the cancelled task, its seconds included
    assert row.tool_seconds > 0
    # A task that completes: one more call, no error.
    fresh_gate.gate.release.set()
    result_of(await modern_call_tool(access, "gated_job", {}, capabilities=DECLARING))
    await settled()
    row = (await orm(ledger))["gated_job"]
    assert (row.calls, row.errors) == (2, 1)


def off_utc_zone() -> str:
    """Kiritimati (UTC+14) or Pago Pago (UTC-11): whichever is not on UTC's date now (one of them never is)."""
    today = datetime.now(UTC).date()
    return next(zone for zone in ZONES if datetime.now(ZoneInfo(zone)).date() != today)


ZONES = ("Pacific/Kiritimati", "Pacific/Pago_Pago")


async def test_a_worker_call_is_counted_by_the_worker_on_the_tenants_day(
    make_access, orm, settings, worker_calls_drained
):
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_DISPATCH": "in_process"}
    access = await make_access(tools=("worker_job",))
    zone = access.tenant.time_zone = off_utc_zone()
    await orm(access.tenant.save)
    reply = await call(access, rpc("tools/call", {"name": "worker_job", "arguments": {"steps": 2}}, id=4))
    assert reply.status == 200
    answer = reply.sse_messages()[-1] if reply.content_type.startswith("text/event-stream") else reply.json()
    assert answer["result"]["structuredContent"]["done"] == 2
    row = (await orm(ledger))["worker_job"]
    assert (row.calls, row.errors, row.bytes_in) == (1, 0, size({"steps": 2}))
    assert row.tool_seconds > 0
    assert row.day == datetime.now(ZoneInfo(zone)).date()  # the zone travelled in the worker's message


async def test_the_cost_is_the_price_plus_what_the_result_reports(make_access, orm, tool_factory):
    access = await make_access(tools=())
    reported = {"content": [{"type": "text", "text": "ok"}], "_meta": {COST: 0.125}}
    await orm(tool_factory, access.server, "priced", price=Decimal("0.25"), static_result=reported)
    await orm(tool_factory, access.server, "free", static_result={"content": [], "_meta": {COST: 2}})
    for _ in range(4):
        result_of(await modern_call_tool(access, "priced", {}))
    result_of(await modern_call_tool(access, "free", {}))
    rows = await orm(ledger)
    assert rows["priced"].cost == Decimal("1.5")  # 4 calls of 0.25 + 0.125
    assert rows["free"].cost == Decimal(2)


async def test_a_python_tool_reports_its_cost_in_its_results_meta(make_access, orm, tool_factory):
    access = await make_access(tools=())
    await orm(tool_factory, access.server, "metered_lookup", price=Decimal("0.1"))
    answered = result_of(await modern_call_tool(access, "metered_lookup", {"cost": 0.02}))
    assert answered["_meta"][COST] == 0.02  # the client sees what it was charged
    result_of(await modern_call_tool(access, "metered_lookup", {"cost": "lots"}))  # not a number: price only
    assert (await orm(ledger))["metered_lookup"].cost == Decimal("0.22")


@pytest.mark.parametrize("bad", [-1, "3", True, {"amount": 1}])
async def test_a_reported_cost_that_is_no_number_at_least_zero_is_ignored(make_access, orm, tool_factory, bad):
    access = await make_access(tools=())
    await orm(
        tool_factory, access.server, "odd", price=Decimal("0.5"), static_result={"content": [], "_meta": {COST: bad}}
    )
    result_of(await modern_call_tool(access, "odd", {}))
    assert (await orm(ledger))["odd"].cost == Decimal("0.5")


async def test_the_tenants_time_zone_decides_the_day(make_access, orm):
    """Kiritimati (UTC+14) and Pago Pago (UTC-11) are 25 hours apart: at any moment one of them is not on UTC's
    date, so a ledger counting in UTC fails this test."""
    zones = ZONES
    accesses = [await make_access(tools=("echo",), server_id=f"tz-{index}") for index in range(2)]
    for access, zone in zip(accesses, zones, strict=True):
        access.tenant.time_zone = zone
        await orm(access.tenant.save)
    before = {zone: datetime.now(ZoneInfo(zone)).date() for zone in zones}
    for access in accesses:
        result_of(await modern_call_tool(access, "echo", {"text": "t"}))
    after = {zone: datetime.now(ZoneInfo(zone)).date() for zone in zones}
    await orm(audit_log.flush)
    days = {
        zone: await orm(lambda access=access: UsageDay.objects.get(tenant=access.tenant).day)
        for access, zone in zip(accesses, zones, strict=True)
    }
    assert all(days[zone] in (before[zone], after[zone]) for zone in zones)
    assert any(day != datetime.now(UTC).date() for day in days.values())


async def test_the_ledger_agrees_with_the_audit_log_over_many_mixed_calls(make_access, orm, tool_factory, settings):
    # Every call runs (rate limits refuse calls before they run: neither log would count them).
    settings.MCP_APP = {**settings.MCP_APP, "RATE_LIMIT_PER_TENANT": 0, "RATE_LIMIT_PER_AGENT": 0}
    access = await make_access(tools=("echo", "boom", "refuse"))
    await orm(tool_factory, access.server, "failing", static_error={"code": -32050, "message": "down"})
    calls = [
        ("echo", {"text": "x"}),
        ("boom", {}),
        ("refuse", {"reason": "r"}),
        ("failing", {}),
        ("echo", {"text": "y" * 50}),
    ]
    total = 1000
    for index in range(total):
        name, arguments = calls[index % len(calls)]
        reply = await modern_call_tool(access, name, arguments, id=index)
        assert reply.status == 200 or name == "failing", reply.body
    await orm(audit_log.flush)

    def totals() -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
        audited: dict[str, tuple[int, int]] = {}
        for record in ToolCall.objects.all():
            failed = record.status in (ToolCall.Status.ERROR, ToolCall.Status.TOOL_ERROR, ToolCall.Status.CANCELLED)
            seen = audited.get(record.tool_name, (0, 0))
            audited[record.tool_name] = (seen[0] + 1, seen[1] + int(failed))
        counted = {row.tool_name: (row.calls, row.errors) for row in UsageDay.objects.all()}
        return audited, counted

    audited, counted = await orm(totals)
    assert counted == audited
    assert sum(calls for calls, _errors in counted.values()) == total
    assert counted["echo"] == (400, 0) and counted["failing"] == (200, 200)


def sample(name: str, tenant: str) -> float:
    return REGISTRY.get_sample_value(name, {"tenant": tenant}) or 0.0


async def test_usage_metrics_count_per_tenant_within_a_bounded_label_set(make_access, orm, tool_factory, settings):
    from mcp_app.limits.metering import tenant_labels

    settings.MCP_APP = {**settings.MCP_APP, "USAGE_METRICS_MAX_TENANTS": 1}
    first = await make_access(tools=(), server_id="metered-1")
    second = await make_access(tools=(), server_id="metered-2")
    for access in (first, second):
        await orm(tool_factory, access.server, "priced", price=Decimal("0.5"), static_result={"content": []})
    tenant_labels.clear()
    labels = (first.tenant.slug, second.tenant.slug, "other")
    before = {label: sample("mcp_usage_calls_total", label) for label in labels}
    cost_before = sample("mcp_usage_cost_total", first.tenant.slug)
    seconds_before = sample("mcp_usage_tool_seconds_total", first.tenant.slug)
    for _ in range(3):
        result_of(await modern_call_tool(first, "priced", {}))
    result_of(await modern_call_tool(second, "priced", {}))  # past the bound: counted as "other"
    assert sample("mcp_usage_calls_total", first.tenant.slug) - before[first.tenant.slug] == 3
    assert sample("mcp_usage_calls_total", "other") - before["other"] == 1
    assert sample("mcp_usage_calls_total", second.tenant.slug) == before[second.tenant.slug]
    assert sample("mcp_usage_cost_total", first.tenant.slug) - cost_before == pytest.approx(1.5)
    assert sample("mcp_usage_tool_seconds_total", first.tenant.slug) > seconds_before
