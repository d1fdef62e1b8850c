"""How much of each budget is spent in the current day and month (docs/budgets.md, "Managing budgets and reading
usage"): what the admin's usage page, ``manage.py mcp_budget show`` and the API show of a tenant's budgets.

The figures are sums of the usage ledger (``UsageDay``) over the tenant's current day and month, in its time zone
(``Tenant.time_zone``): one query per tenant, whatever the number of budgets. A tenant-wide budget counts every
agent's usage, an agent's budget its own. Read-only, and off the request path: not what enforces a budget
(``mcp_app.limits.budgets``), which counts as calls end; the ledger trails it by its flush interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, Q, Sum
from django.utils import timezone

from ..models import Budget, Tenant, UsageDay
from ..models.usage import METRICS, PERIODS
from .periods import Period, current, zone


def figure(value: float) -> str:
    """A figure as people read it: whole numbers without decimals, others with at most four (``12.5``, ``0.0025``)."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value):
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Burn:
    """One limit of a budget: ``used`` of ``limit`` in the period (``percent`` may pass 100)."""

    metric: str
    period: str
    used: float
    limit: float
    resets_at: datetime

    @property
    def percent(self) -> float:
        if self.limit <= 0:
            return 100.0  # a limit of zero: nothing is allowed, the budget is spent
        return 100.0 * self.used / self.limit

    @property
    def bar_percent(self) -> int:
        """The width of the bar drawn for it: the percentage, within 0 … 100."""
        return max(0, min(100, round(self.percent)))

    @property
    def used_shown(self) -> str:
        return figure(self.used)

    @property
    def limit_shown(self) -> str:
        return figure(self.limit)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "period": self.period,
            "used": self.used,
            "limit": self.limit,
            "percent": round(self.percent, 1),
            "resets_at": self.resets_at.isoformat(),
        }


@dataclass(frozen=True)
class BudgetBurn:
    """A budget and the burn of each of its limits, day limits first."""

    budget: Budget
    burns: tuple[Burn, ...]


def periods(time_zone: str, now: datetime | None = None) -> dict[str, Period]:
    """The current ``day`` and ``month`` in ``time_zone`` (``periods.current``), each resetting at a time shown in
    that zone (the same instant as the counters' UTC one)."""
    local = zone(time_zone)
    return {
        name: replace(period, resets_at=period.resets_at.astimezone(local))
        for name, period in current(time_zone, now or timezone.now()).items()
    }


Sums = dict[tuple[str, str], float]


def _sums(tenant: Tenant, current: dict[str, Period]) -> tuple[Sums, dict[int, Sums]]:
    """``(tenant's, {agent pk: agent's})``: ``{(metric, period): used}`` of the ledger this day and month. Rows of
    deleted agents count in the tenant's."""
    today = current["day"].start
    aggregates = {
        f"{metric}_{period}": Sum(metric, filter=Q(day=today) if period == "day" else None)
        for metric in METRICS
        for period in PERIODS
    }
    rows = (
        UsageDay.objects.filter(tenant=tenant, day__gte=current["month"].start, day__lte=today)
        .values("agent_id")
        .annotate(**aggregates)
        .order_by()
    )
    total: Sums = {(metric, period): 0.0 for metric in METRICS for period in PERIODS}
    agents: dict[int, Sums] = {}
    for values in rows:
        row: dict[str, Any] = dict(values)
        own = agents.setdefault(row["agent_id"], {}) if row["agent_id"] is not None else {}
        for key in total:
            value = float(row[f"{key[0]}_{key[1]}"] or Decimal(0))
            own[key] = own.get(key, 0.0) + value
            total[key] += value
    return total, agents


def spent_so_far(tenant: Tenant, agent_pk: int | None, now: datetime | None = None) -> Sums:
    """``{(metric, period): used}`` of the ledger this day and month: the tenant's (``agent_pk`` None, every agent
    counted) or one agent's. What a new budget's counters start from (``budget_seed``)."""
    total, agents = _sums(tenant, periods(tenant.time_zone, now))
    return total if agent_pk is None else agents.get(agent_pk, {})


def burn_down(tenant: Tenant, budgets: Iterable[Budget], now: datetime | None = None) -> list[BudgetBurn]:
    """Each of ``budgets`` (of ``tenant``) with the burn of each limit it sets, this day and this month."""
    current = periods(tenant.time_zone, now)
    total, agents = _sums(tenant, current)
    burned = []
    for budget in budgets:
        used = total if budget.agent_id is None else agents.get(budget.agent_id, {})
        limits = budget.limits()
        burns = tuple(
            Burn(metric, period, used.get((metric, period), 0.0), limits[(metric, period)], current[period].resets_at)
            for period in PERIODS
            for metric in METRICS
            if (metric, period) in limits
        )
        burned.append(BudgetBurn(budget, burns))
    return burned


def tenant_budgets(tenant: Tenant) -> list[Budget]:
    """Every budget of the tenant and its agents, the operator's and the tenant admins': tenant-wide first, then
    by agent, the operator's before the tenant's."""
    return list(
        Budget.objects.filter(tenant=tenant)
        .select_related("tenant", "agent")
        .order_by(F("agent__agent_id").asc(nulls_first=True), "set_by")
    )


def burns_by_budget(budgets: Iterable[Budget], now: datetime | None = None) -> dict[int, BudgetBurn]:
    """``{budget pk: its burn}`` of budgets of any tenants: one query per tenant among them."""
    by_tenant: dict[int, list[Budget]] = {}
    for budget in budgets:
        by_tenant.setdefault(budget.tenant_id, []).append(budget)
    return {burn.budget.pk: burn for group in by_tenant.values() for burn in burn_down(group[0].tenant, group, now)}
