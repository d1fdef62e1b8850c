"""Budgets at the wire (issue 29): a tenant or agent that has spent its day's or month's calls, tool-seconds or
cost is refused before the tool runs, HTTP 429 with ``Retry-After`` until the period resets and JSON-RPC -32013
with the documented ``data``, in both eras and for a call that would have streamed; the tightest budget holds;
a new period starts from zero; the alert threshold is announced once per period to a real webhook server,
signed. On PostgreSQL + Redis the counters are in Redis (``RedisBudgets``, folded with the rate buckets); on the
embedded default in the process (``LocalBudgets``). The clock of the periods is the test's.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from mcp_app.limits import budget_alerts, budget_meter, budgets, usage
from mcp_app.protocol.errors import BUDGET_EXCEEDED
from tests.helpers import call, open_session, rpc, wait_until
from tests.helpers import tool_call as era_tool_call
from tests.request_path import assert_warm_call_is_free, caches_ready

# 10:00 UTC today is 19:00 in Tokyo (no daylight saving time): the day resets at 15:00 UTC, in 5 hours.
ZONE = "Asia/Tokyo"
TODAY = datetime.now(UTC).replace(hour=10, minute=0, second=0, microsecond=0)
DAY_RESET = TODAY.replace(hour=15)


@pytest.fixture(autouse=True)
def fresh_counters(settings: Any, use_backend: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Counters of this test only (primary keys are reused between tests), and the periods at the test's clock."""
    from mcp_app.limits.rates import RedisRates

    if settings.REDIS_URL:
        use_backend("RATE_LIMITS", RedisRates(settings.REDIS_URL))
        backend = use_backend("BUDGETS", budgets.RedisBudgets(settings.REDIS_URL, f"mcp:test:{uuid.uuid4().hex}"))
    else:
        backend = use_backend("BUDGETS", budgets.LocalBudgets())
    clock = Clock(TODAY)
    monkeypatch.setattr(budgets, "clock", clock)
    settings.MCP_APP = {**settings.MCP_APP, "BUDGET_ALERT_ALLOWED_NETWORKS": ["127.0.0.1"]}
    yield clock
    assert budget_alerts.alerts.wait_idle(10.0)
    assert backend is not None


def tool_call(era: str, name: str = "echo", request_id: int = 1) -> tuple[dict[str, Any], dict[str, str]]:
    body, headers = era_tool_call(era, name, "hi")
    return {**body, "id": request_id}, headers


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def budget(orm: Any, access: Any, *, agent: Any = None, set_by: str = "operator", **limits: Any) -> Any:
    from mcp_app.models import Budget

    def create() -> Any:
        if access.tenant.time_zone != ZONE:
            access.tenant.time_zone = ZONE
            access.tenant.save()
        return Budget.objects.create(tenant=access.tenant, agent=agent, set_by=set_by, **limits)

    return await orm(create)


def assert_budget_exceeded(reply: Any, request_id: int, **data: Any) -> dict[str, Any]:
    assert reply.status == 429, reply.body
    answer = reply.json()
    assert answer["id"] == request_id
    assert answer["error"]["code"] == BUDGET_EXCEEDED == -32013
    found = answer["error"]["data"]
    assert {key: found[key] for key in data} == data
    assert set(found) == {"scope", "metric", "period", "budget", "used", "resetsAt"}
    return dict(found)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_exactly_n_calls_are_served_then_429_with_retry_after_until_the_tenants_midnight(
    era: str, make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    access = await make_access(tools=("echo",))
    await budget(orm, access, calls_per_day=3)
    for request_id in (1, 2, 3):
        body, headers = tool_call(era, request_id=request_id)
        served = await call(access, body, headers=headers)
        assert served.status == 200, served.body
        assert served.json()["result"]["content"] == [{"type": "text", "text": "hi"}]
    body, headers = tool_call(era, request_id=4)
    refused = await call(access, body, headers=headers)
    assert_budget_exceeded(
        refused, 4, scope="tenant", metric="calls", period="day", budget=3, used=3,
        resetsAt=DAY_RESET.isoformat().replace("+00:00", "Z"),
    )  # fmt: skip
    assert refused.headers["retry-after"] == str(5 * 3600)
    listed = await call(access, rpc("tools/list"), headers={"mcp-protocol-version": "2025-11-25"})
    assert listed.status == 200, "only tools/call is charged and refused"


async def test_a_call_that_would_stream_on_a_session_is_refused_the_same_way(
    make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    access = await make_access(tools=("progress_demo", "echo"))
    await budget(orm, access, calls_per_month=1)
    session = await open_session(access)
    headers = {
        "mcp-session-id": session,
        "mcp-protocol-version": "2025-11-25",
        "accept": "text/event-stream, application/json",
    }
    streamed = rpc("tools/call", {"name": "progress_demo", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}})
    first = await call(access, streamed, headers=headers)
    assert first.status == 200 and first.headers["content-type"].startswith("text/event-stream"), first.body
    refused = await call(access, {**streamed, "id": 2}, headers=headers)
    assert refused.headers["content-type"].startswith("application/json")
    first_of_next_month = (TODAY.date().replace(day=1) + timedelta(days=32)).replace(day=1)
    resets = datetime(first_of_next_month.year, first_of_next_month.month, 1, tzinfo=UTC) - timedelta(hours=9)
    assert_budget_exceeded(
        refused, 2, scope="tenant", metric="calls", period="month", budget=1, used=1,
        resetsAt=resets.isoformat().replace("+00:00", "Z"),
    )  # fmt: skip
    assert refused.headers["retry-after"] == str(int((resets - TODAY).total_seconds()))


async def test_an_agent_budget_stops_its_agent_and_the_tenant_budget_stops_them_all(
    make_access: Callable[..., Awaitable[Any]], orm: Any, agent_factory: Any, token_factory: Any
) -> None:
    access = await make_access(tools=("echo",))

    def second() -> Any:
        agent = agent_factory(tenant=access.tenant)
        token, raw = token_factory(agent=agent, servers=[access.server])
        return replace(access, agent=agent, token=token, raw_token=raw)

    other = await orm(second)
    await budget(orm, access, agent=access.agent, set_by="tenant", calls_per_day=2)
    await budget(orm, access, calls_per_day=5)
    body, headers = tool_call("legacy")
    for _ in range(2):
        assert (await call(access, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(access, body, headers=headers), 1, scope="agent", budget=2, used=2)
    for _ in range(3):  # the other agent spends the rest of the tenant's day
        assert (await call(other, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(other, body, headers=headers), 1, scope="tenant", budget=5, used=5)


async def test_the_tighter_of_an_operator_budget_and_a_looser_tenant_admin_budget_holds(
    make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    access = await make_access(tools=("echo",))
    await budget(orm, access, set_by="tenant", calls_per_day=10)
    await budget(orm, access, set_by="operator", calls_per_day=2)
    body, headers = tool_call("modern")
    for _ in range(2):
        assert (await call(access, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(access, body, headers=headers), 1, scope="tenant", budget=2, used=2)


async def test_a_budget_added_while_the_token_is_cached_applies_at_once_and_a_new_day_starts_from_zero(
    make_access: Callable[..., Awaitable[Any]], orm: Any, fresh_counters: Clock
) -> None:
    access = await make_access(tools=("echo",))
    access.tenant.time_zone = ZONE
    await orm(access.tenant.save)
    await caches_ready()
    body, headers = tool_call("legacy")
    assert (await call(access, body, headers=headers)).status == 200  # the token's snapshot is cached now
    await budget(orm, access, calls_per_day=1)  # only the budget's own save can drop the snapshot
    assert (await call(access, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(access, body, headers=headers), 1, used=1)
    fresh_counters.now = DAY_RESET  # Tokyo's midnight
    assert (await call(access, body, headers=headers)).status == 200
    refused = await call(access, body, headers=headers)
    assert_budget_exceeded(refused, 1, used=1, resetsAt=(DAY_RESET + timedelta(days=1)).isoformat()[:19] + "Z")
    assert refused.headers["retry-after"] == str(24 * 3600)


def spent(access: Any, *, seconds: float = 0.0, cost: str = "0") -> usage.Spent:
    return usage.Spent(
        tenant_pk=access.tenant.pk, agent_pk=access.agent.pk, server_pk=access.server.pk,
        agent_key=access.agent.agent_id, server_key=access.server.server_id, tool_name="echo",
        day=(TODAY + timedelta(hours=9)).date(),
        errors=0, tool_seconds=seconds, bytes_in=10, bytes_out=10, cost=Decimal(cost),
    )  # fmt: skip


@pytest.mark.parametrize(("metric", "limits", "amounts"), [
    ("tool_seconds", {"tool_seconds_per_day": 2.0}, {"seconds": 1.25}),
    ("cost", {"cost_per_month": Decimal("0.50")}, {"cost": "0.30"}),
])  # fmt: skip
async def test_tool_seconds_and_cost_budgets_stop_calls_once_ended_calls_have_spent_them(
    metric: str, limits: dict[str, Any], amounts: dict[str, Any], make_access: Any, orm: Any
) -> None:
    access = await make_access(tools=("echo",))
    await budget(orm, access, agent=access.agent, **limits)
    body, headers = tool_call("modern")
    usage.spent(spent(access, **amounts))
    await orm(budget_meter.meter.flush)
    assert (await call(access, body, headers=headers)).status == 200, "under the budget: served"
    usage.spent(spent(access, **amounts))
    await orm(budget_meter.meter.flush)
    refused = await call(access, body, headers=headers)
    used = 2.5 if metric == "tool_seconds" else 0.6
    found = assert_budget_exceeded(refused, 1, scope="agent", metric=metric)
    # plus what the served echo itself ran (microseconds), on the same counter when the real day is TODAY's
    assert found["used"] == pytest.approx(used, abs=0.05) and found["budget"] == pytest.approx(float(*limits.values()))


async def test_the_alert_threshold_is_posted_once_per_period_signed_to_a_real_webhook_server(
    make_access: Any, orm: Any, webhook_server: Any, fresh_counters: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp_app.models import BudgetAlert, BudgetAlertHook
    from mcp_app.observability.metrics import BUDGET_ALERTS

    access = await make_access(tools=("echo",))
    limit = await budget(orm, access, calls_per_day=5)  # 80%: the fourth call
    hook = BudgetAlertHook(tenant=access.tenant, url=webhook_server.url("/content"))
    secret = hook.new_signing_secret()
    await orm(hook.save)
    before = BUDGET_ALERTS.labels(metric="calls", period="day")._value.get()
    body, headers = tool_call("legacy")
    with caplog.at_level(logging.INFO, logger="mcp_app.audit"):
        for _ in range(5):
            assert (await call(access, body, headers=headers)).status == 200
        assert (await call(access, body, headers=headers)).status == 429
        assert budget_alerts.alerts.wait_idle(10.0)
    assert len(webhook_server.requests) == 1
    sent = webhook_server.requests[0]
    assert sent.method == "POST" and sent.headers["Content-Type"] == "application/json"
    stamp, signature = (part.split("=", 1)[1] for part in sent.headers["X-MCP-Signature"].split(","))
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + sent.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(signature, expected) and abs(int(stamp) - time.time()) < 60
    assert sent.json() == {
        "type": "budget.alert", "tenant": access.tenant.slug, "scope": "tenant", "agent": None, "metric": "calls", "period": "day",
        "percent": 80, "used": 4, "budget": 5, "periodStart": (TODAY + timedelta(hours=9)).date().isoformat(),
        "resetsAt": DAY_RESET.isoformat().replace("+00:00", "Z"),
    }  # fmt: skip
    alert = await orm(BudgetAlert.objects.get, budget=limit)
    assert (alert.metric, alert.period, alert.percent, alert.used, alert.delivery_error) == ("calls", "day", 80, 4, "")
    assert alert.delivered_at is not None
    assert BUDGET_ALERTS.labels(metric="calls", period="day")._value.get() == before + 1
    assert any("budget alert" in record.getMessage() and "80%" in record.getMessage() for record in caplog.records)
    assert secret not in caplog.text
    fresh_counters.now = DAY_RESET + timedelta(hours=1)  # the next day alerts again, once
    for _ in range(5):
        assert (await call(access, body, headers=headers)).status == 200
    assert budget_alerts.alerts.wait_idle(10.0)
    assert len(webhook_server.requests) == 2
    assert await orm(BudgetAlert.objects.filter(budget=limit).count) == 2


async def test_an_undeliverable_alert_is_retried_then_its_error_is_stored(
    make_access: Any, orm: Any, webhook_server: Any, settings: Any
) -> None:
    from mcp_app.models import BudgetAlert, BudgetAlertHook

    settings.MCP_APP = {**settings.MCP_APP, "BUDGET_ALERT_ATTEMPTS": 2}
    access = await make_access(tools=("echo",))
    limit = await budget(orm, access, agent=access.agent, tool_seconds_per_day=10.0, alert_percent=50)
    hook = BudgetAlertHook(tenant=access.tenant, url=webhook_server.url("/status/500"))
    hook.new_signing_secret()
    await orm(hook.save)
    usage.spent(spent(access, seconds=6.0))  # crossed when ended calls reach the counters, off the request path
    await orm(budget_meter.meter.flush)
    assert budget_alerts.alerts.wait_idle(10.0)
    assert [request.path for request in webhook_server.requests] == ["/status/500"] * 2
    alert = await orm(BudgetAlert.objects.get, budget=limit)
    assert (alert.metric, alert.used, alert.delivered_at) == ("tool_seconds", 6.0, None)
    assert alert.delivery_error == "attempt 2: HTTP 500"


async def test_an_alert_to_a_private_address_not_allow_listed_is_refused_before_connecting(
    make_access: Any, orm: Any, webhook_server: Any, settings: Any
) -> None:
    from mcp_app.models import BudgetAlert, BudgetAlertHook

    settings.MCP_APP = {**settings.MCP_APP, "BUDGET_ALERT_ALLOWED_NETWORKS": [], "BUDGET_ALERT_ATTEMPTS": 1}
    access = await make_access(tools=("echo",))
    limit = await budget(orm, access, calls_per_day=1, alert_percent=100)
    hook = BudgetAlertHook(tenant=access.tenant, url=webhook_server.url("/content"))
    hook.new_signing_secret()
    await orm(hook.save)
    body, headers = tool_call("legacy")
    assert (await call(access, body, headers=headers)).status == 200
    assert budget_alerts.alerts.wait_idle(10.0)
    assert webhook_server.requests == []
    alert = await orm(BudgetAlert.objects.get, budget=limit)
    assert alert.delivered_at is None and "ForbiddenAddress" in alert.delivery_error


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_warm_call_with_budgets_on_runs_no_query_and_no_hop(
    era: str, make_access: Callable[..., Awaitable[Any]], orm: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Budgets come with the cached token snapshot, and their counters with the rate buckets' round trip."""

    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_INTERVAL_SECONDS": 3600}
    access = await make_access(tools=("async_echo",))
    await budget(orm, access, calls_per_day=2, tool_seconds_per_month=100.0)
    await budget(orm, access, agent=access.agent, set_by="tenant", cost_per_day=Decimal("1"))
    body, headers = tool_call(era, "async_echo")
    await assert_warm_call_is_free(monkeypatch, access, body, headers)
    assert_budget_exceeded(await call(access, body, headers=headers), 1, metric="calls")


@pytest.mark.usefixtures("worker_calls_drained")
async def test_a_worker_call_over_the_budget_is_refused_the_same_way_and_never_runs(
    make_access: Callable[..., Awaitable[Any]], orm: Any, settings: Any, fresh_gate: Any
) -> None:
    from mcp_app.models import ServerTool

    settings.MCP_APP = {**settings.MCP_APP, "WORKER_DISPATCH": "in_process"}
    access = await make_access(tools=("record",))
    await orm(ServerTool.objects.filter(server=access.server).update, execution="worker")
    await budget(orm, access, agent=access.agent, calls_per_day=1)
    fresh_gate.executions.clear()
    record = rpc("tools/call", {"name": "record", "arguments": {"kind": "alpha"}})
    served = await call(access, record, headers={"mcp-protocol-version": "2025-11-25"})
    assert served.status == 200 and served.json()["result"]["content"] == [{"type": "text", "text": "alpha x1"}]
    refused = await call(access, {**record, "id": 2}, headers={"mcp-protocol-version": "2025-11-25"})
    assert_budget_exceeded(refused, 2, scope="agent", metric="calls", budget=1, used=1)
    assert fresh_gate.executions == [("record", {"kind": "alpha", "count": 1})]


async def test_a_change_of_the_tenants_time_zone_moves_its_day_at_once(
    make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    """10:00 UTC is still today in Tokyo but already tomorrow on Kiritimati (UTC+14): the cached snapshot is
    dropped with the tenant's save, and the calls count in the new day."""
    access = await make_access(tools=("echo",))
    await budget(orm, access, calls_per_day=1)
    await caches_ready()
    body, headers = tool_call("modern")
    assert (await call(access, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(access, body, headers=headers), 1, used=1)
    access.tenant.time_zone = "Pacific/Kiritimati"
    await orm(access.tenant.save)
    assert (await call(access, body, headers=headers)).status == 200
    refused = await call(access, body, headers=headers)
    assert_budget_exceeded(refused, 1, used=1, resetsAt=(TODAY + timedelta(days=1)).isoformat()[:19] + "Z")
    assert refused.headers["retry-after"] == str(24 * 3600)


async def test_a_batch_that_does_not_fit_the_budget_is_refused_whole_and_counts_nothing(
    make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    access = await make_access(tools=("echo",))
    await budget(orm, access, calls_per_day=2)
    batch = [tool_call("legacy", request_id=n)[0] for n in range(3)]
    refused = await call(access, batch, headers={"mcp-protocol-version": "2025-03-26"})
    assert refused.status == 429, refused.body
    assert refused.json()["error"]["data"] == {**refused.json()["error"]["data"], "budget": 2, "used": 0}
    body, headers = tool_call("legacy")
    for _ in range(2):
        assert (await call(access, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(access, body, headers=headers), 1, used=2)


async def test_the_meters_own_thread_brings_spending_to_the_counters_within_its_interval(
    make_access: Callable[..., Awaitable[Any]], orm: Any, settings: Any
) -> None:
    """No flush by hand: the overshoot bound of docs/budgets.md rests on the flusher's interval."""
    settings.MCP_APP = {**settings.MCP_APP, "BUDGET_FLUSH_INTERVAL_SECONDS": 0.1}
    access = await make_access(tools=("echo",))
    await budget(orm, access, tool_seconds_per_day=1.0)
    body, headers = tool_call("legacy")
    usage.spent(spent(access, seconds=1.0))

    async def refused() -> bool:
        return (await call(access, body, headers=headers)).status == 429

    await wait_until(refused, timeout=5.0, what="the spent tool-seconds to refuse calls")


async def test_a_budget_set_after_900_calls_of_the_day_serves_100_more_then_refuses(
    make_access: Callable[..., Awaitable[Any]], orm: Any, usage_factory: Any
) -> None:
    """The counters start from the ledger: without the seed the day's budget of 1,000 would serve 1,000 more."""
    access = await make_access(tools=("echo",))

    def earlier_calls() -> None:
        access.tenant.time_zone = ZONE
        access.tenant.save()
        usage_factory(access.tenant, access.agent, TODAY.date(), calls=600)
        usage_factory(access.tenant, None, TODAY.date(), calls=300)  # a deleted agent's: the tenant's too
        usage_factory(access.tenant, access.agent, TODAY.date() - timedelta(days=1), calls=5000)  # yesterday's

    await orm(earlier_calls)
    await budget(orm, access, calls_per_day=1000)  # committed: the seed runs then
    headers = {"mcp-protocol-version": "2025-03-26"}
    for first in (0, 50):  # two batches of 50, the most one POST holds
        batch = [tool_call("legacy", request_id=first + n)[0] for n in range(50)]
        served = await call(access, batch, headers=headers)
        assert served.status == 200, served.body
        assert [reply.get("error") for reply in served.json()] == [None] * 50
    body, legacy = tool_call("legacy", request_id=101)
    refused = await call(access, body, headers=legacy)
    assert_budget_exceeded(refused, 101, scope="tenant", metric="calls", period="day", budget=1000, used=1000)


async def test_an_agents_budget_starts_from_its_own_ledger_and_a_live_counter_is_never_lowered(
    make_access: Callable[..., Awaitable[Any]], orm: Any, usage_factory: Any
) -> None:
    access = await make_access(tools=("echo",))
    await orm(lambda: usage_factory(access.tenant, access.agent, TODAY.date(), calls=3))
    await orm(lambda: usage_factory(access.tenant, None, TODAY.date(), calls=40))  # the tenant's, not this agent's
    mine = await budget(orm, access, agent=access.agent, set_by="tenant", calls_per_day=5)
    body, headers = tool_call("modern")
    for _ in range(2):
        assert (await call(access, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(access, body, headers=headers), 1, scope="agent", budget=5, used=5)

    def raise_it() -> None:
        mine.calls_per_day = 6
        mine.save()

    await orm(raise_it)  # seeds again from the ledger (still 3: not flushed), but the live counter (5) stays
    assert (await call(access, body, headers=headers)).status == 200
    assert_budget_exceeded(await call(access, body, headers=headers), 1, scope="agent", budget=6, used=6)
