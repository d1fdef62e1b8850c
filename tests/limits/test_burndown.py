"""The budgets' burn-down (``mcp_app.limits.burndown``) against rows of the usage ledger inserted here: sums per
budget scope, the tenant's day and month in its own time zone, when each period resets, one query per tenant."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mcp_app.limits.burndown import burn_down, burns_by_budget, figure, periods, tenant_budgets
from mcp_app.models import Budget

pytestmark = pytest.mark.django_db

# 2026-03-31 23:30 UTC: already April 1st in Paris (UTC+2 in summer time), still March 31st in UTC.
NOW = datetime(2026, 3, 31, 23, 30, tzinfo=UTC)


def lines(burn: Any) -> dict[tuple[str, str], tuple[float, float, float]]:
    return {(line.metric, line.period): (line.used, line.limit, round(line.percent, 1)) for line in burn.burns}


def test_sums_per_scope_this_day_and_month(tenant_factory: Any, agent_factory: Any, usage_factory: Any) -> None:
    tenant = tenant_factory()
    alice, bob = agent_factory(tenant=tenant), agent_factory(tenant=tenant)
    other = agent_factory()  # another tenant's usage never counts here
    today, earlier, last_month = date(2026, 3, 31), date(2026, 3, 2), date(2026, 2, 28)
    usage_factory(tenant, alice, today, calls=30, tool_seconds=1.5, cost=Decimal("0.25"))
    usage_factory(tenant, alice, today, calls=10, tool_seconds=0.5, cost=Decimal("0.25"))
    usage_factory(tenant, alice, earlier, calls=100, tool_seconds=10.0, cost=Decimal("2"))
    usage_factory(tenant, bob, today, calls=5)
    usage_factory(tenant, None, today, calls=1)  # a deleted agent's: the tenant's total only
    usage_factory(tenant, alice, last_month, calls=999)
    usage_factory(other.tenant, other, today, calls=777)
    whole = Budget.objects.create(tenant=tenant, set_by="operator", calls_per_day=50, calls_per_month=200)
    own = Budget.objects.create(
        tenant=tenant, agent=alice, calls_per_day=50, tool_seconds_per_month=40, cost_per_day=Decimal("1")
    )
    empty = Budget.objects.create(tenant=tenant, agent=bob)

    with CaptureQueriesContext(connection) as queries:
        burns = burn_down(tenant, [whole, own, empty], now=NOW)
    assert len(queries) == 1

    assert lines(burns[0]) == {("calls", "day"): (46.0, 50.0, 92.0), ("calls", "month"): (146.0, 200.0, 73.0)}
    assert lines(burns[1]) == {
        ("calls", "day"): (40.0, 50.0, 80.0),  # 40 of 50 calls: 80 %
        ("cost", "day"): (0.5, 1.0, 50.0),
        ("tool_seconds", "month"): (12.0, 40.0, 30.0),
    }
    assert [(b.metric, b.period) for b in burns[1].burns] == [
        ("calls", "day"),
        ("cost", "day"),
        ("tool_seconds", "month"),
    ]  # day limits first
    assert burns[2].burns == ()


def test_periods_are_the_tenants_day_and_month(tenant_factory: Any, usage_factory: Any) -> None:
    paris = tenant_factory(time_zone="Europe/Paris")
    usage_factory(paris, None, date(2026, 3, 31), calls=7)  # yesterday and last month, in Paris
    usage_factory(paris, None, date(2026, 4, 1), calls=3)
    budget = Budget.objects.create(tenant=paris, calls_per_day=10, calls_per_month=10)

    (burn,) = burn_down(paris, [budget], now=NOW)
    assert lines(burn) == {("calls", "day"): (3.0, 10.0, 30.0), ("calls", "month"): (3.0, 10.0, 30.0)}
    resets = {line.period: line.resets_at.isoformat() for line in burn.burns}
    assert resets == {"day": "2026-04-02T00:00:00+02:00", "month": "2026-05-01T00:00:00+02:00"}

    utc = periods("UTC", NOW)
    assert (utc["day"].start, utc["month"].start) == (date(2026, 3, 31), date(2026, 3, 1))
    assert utc["month"].resets_at.isoformat() == "2026-04-01T00:00:00+00:00"
    december = periods("UTC", datetime(2026, 12, 31, 12, tzinfo=UTC))["month"]
    assert december.resets_at.isoformat() == "2027-01-01T00:00:00+00:00"


def test_a_zero_limit_is_spent_and_bars_stay_within_their_cell(tenant_factory: Any, usage_factory: Any) -> None:
    tenant = tenant_factory()
    usage_factory(tenant, None, date(2026, 3, 31), calls=120)
    budget = Budget.objects.create(tenant=tenant, calls_per_day=0, calls_per_month=100)
    (burn,) = burn_down(tenant, [budget], now=NOW)
    day, month = burn.burns
    assert (day.percent, day.bar_percent) == (100.0, 100)
    assert (month.percent, month.bar_percent) == (120.0, 100)
    assert month.as_dict() == {
        "metric": "calls",
        "period": "month",
        "used": 120.0,
        "limit": 100.0,
        "percent": 120.0,
        "resets_at": "2026-04-01T00:00:00+00:00",
    }


def test_budgets_of_several_tenants_cost_one_query_each(
    tenant_factory: Any, agent_factory: Any, usage_factory: Any
) -> None:
    budgets = []
    for _ in range(3):
        tenant = tenant_factory()
        usage_factory(tenant, None, date(2026, 3, 31), calls=4)
        budgets += [
            Budget.objects.create(tenant=tenant, set_by="operator", calls_per_day=8),
            Budget.objects.create(tenant=tenant, calls_per_day=16),
        ]
    with CaptureQueriesContext(connection) as queries:
        burns = burns_by_budget(budgets, now=NOW)
    assert len(queries) == 3
    assert {pk: burn.burns[0].percent for pk, burn in burns.items()} == {
        budget.pk: 50.0 if budget.set_by == "operator" else 25.0 for budget in budgets
    }


def test_tenant_budgets_lists_the_whole_tenant_first(tenant_factory: Any, agent_factory: Any) -> None:
    tenant = tenant_factory()
    zed, abe = agent_factory(tenant=tenant, agent_id="zed"), agent_factory(tenant=tenant, agent_id="abe")
    made = [
        Budget.objects.create(tenant=tenant, agent=zed),
        Budget.objects.create(tenant=tenant),
        Budget.objects.create(tenant=tenant, agent=abe, set_by="operator"),
        Budget.objects.create(tenant=tenant, set_by="operator"),
        Budget.objects.create(tenant=tenant, agent=abe),
    ]
    Budget.objects.create(tenant=tenant_factory())
    order = [made[3], made[1], made[2], made[4], made[0]]
    assert [budget.pk for budget in tenant_budgets(tenant)] == [budget.pk for budget in order]


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.0, "0"), (2000.0, "2000"), (12.5, "12.5"), (0.75, "0.75"), (0.0025, "0.0025"), (1 / 3, "0.3333")],
)
def test_figures_read_as_people_write_them(value: float, shown: str) -> None:
    assert figure(value) == shown
