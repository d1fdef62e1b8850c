"""Budgets at admission (docs/budgets.md): a ``tools/call`` over a budget of its tenant or agent is refused before
its tool runs, HTTP 429 with ``Retry-After`` until the period resets and JSON-RPC -32013 (``BudgetExceeded``).

- ``await take(token, buckets, calls)``: the request's rate buckets (``rates``) and its budgets in one step and,
  with Redis, one round trip: ``calls`` counted against every calls budget (checked and counted atomically, no
  overshoot), and refused while a tool-seconds or cost counter has reached its limit. Raises ``RateLimited`` or
  ``BudgetExceeded``; a refused request counts nowhere. The budgets come from the token's snapshot (no query).
- ``add(counters, thresholds)``: what ended calls spent, from ``budget_meter``'s flusher (never the request).
- ``seed(seeds)``: counters that do not exist yet started from what the ledger says (``budget_seed``).
- ``plan``: the counters of a set of budget limits, one per scope (the tenant, or the agent), metric and period,
  named by the period's first day in the tenant's time zone (``periods``), so a new period starts from zero.
  The counters live in the ``BUDGETS`` backend (``budget_counters``); while Redis is unreachable, this
  process's counters decide, as the rates do.
- A threshold (``alert_percent`` of a limit) crossed by an increment is handed to ``budget_alerts``.

Not here: measuring a call (``usage``), the ledger, managing budgets (admin, API, CLI).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..backends import Health, backends
from ..models.usage import BudgetLimit
from ..observability import metrics
from ..protocol.errors import BudgetExceeded
from . import budget_alerts, rates
from .budget_counters import (
    ADD,
    CHARGE,
    GATE,
    KEY_PREFIX,
    Counter,
    LocalBudgets,
    Outcome,
    RedisBudgets,
    Seed,
    Threshold,
    counter_key,
)
from .periods import Period, period_of, period_of_day
from .rates import Bucket

__all__ = [
    "ADD", "BUDGETS", "CHARGE", "GATE", "KEY_PREFIX", "Counter", "LocalBudgets", "Outcome", "Period", "RedisBudgets",
    "Seed", "Threshold", "add", "clock", "counter_key", "get_budgets", "period_of", "period_of_day", "plan", "seed",
    "take",
]  # fmt: skip


def clock() -> datetime:
    """Now (UTC): which period a request falls in. Tests put their own clock in its place."""
    return datetime.now(UTC)


def plan(
    limits: Sequence[BudgetLimit],
    tenant_pk: int,
    agent_pk: int | None,
    amounts: dict[str, float],
    modes: dict[str, int],
) -> Callable[[Callable[[str], Period]], tuple[list[Counter], list[Threshold]]]:
    """The counters and thresholds of ``limits`` (one counter per scope, metric and period, at the tightest limit
    of the rows that share it), given each metric's mode and amount; the periods from ``period``."""

    def build(period: Callable[[str], Period]) -> tuple[list[Counter], list[Threshold]]:
        counters: list[Counter] = []
        thresholds: list[Threshold] = []
        index: dict[tuple[str, str, str], int] = {}
        for limit in limits:
            if limit.metric not in modes:
                continue
            where = (limit.scope, limit.metric, limit.period)
            if where not in index:
                owner = tenant_pk if limit.scope == "tenant" else agent_pk
                if owner is None:
                    continue
                chosen = period(limit.period)
                index[where] = len(counters)
                counters.append(
                    Counter(
                        counter_key(limit.scope, owner, limit.metric, chosen),
                        modes[limit.metric],
                        limit.limit,
                        amounts.get(limit.metric, 0.0),
                        tenant_pk,
                        agent_pk,
                        limit.scope,
                        limit.metric,
                        chosen,
                    )
                )
            found = counters[index[where]]
            if found.limit > limit.limit:
                counters[index[where]] = _with_limit(found, limit.limit)
            if modes[limit.metric] != GATE:
                thresholds.append(Threshold(index[where], limit.limit * limit.alert_percent / 100.0, limit))
        return counters, thresholds

    return build


def _with_limit(counter: Counter, limit: float) -> Counter:
    return Counter(
        counter.key, counter.mode, limit, counter.amount, counter.tenant_pk, counter.agent_pk, counter.scope,
        counter.metric, counter.period,
    )  # fmt: skip


async def take(token: Any, buckets: Sequence[Bucket], calls: int) -> None:
    """Draw ``buckets`` and charge ``calls`` to ``token``'s budgets (see the module docstring)."""
    now = clock()
    modes = {"calls": CHARGE, "tool_seconds": GATE, "cost": GATE}
    build = plan(token.budgets, token.tenant_pk, token.agent_pk, {"calls": float(calls)}, modes)
    counters, thresholds = build(lambda name: period_of(name, token.time_zone, now))
    rate_backend, backend = rates.get_rates(), get_budgets()
    if not backend.folds(rate_backend):
        await rates.take(buckets)
        buckets = ()
    outcome = await _health.attempt(
        backend.take(buckets, rate_backend, counters, thresholds),
        lambda: _fallback.take_sync(counters, thresholds, lambda: rates.take_during_outage(buckets)),
    )
    rates.refuse(buckets, outcome.rate_refused)
    _announce(counters, thresholds, outcome)
    if outcome.blocked is not None:
        counter = counters[outcome.blocked]
        metrics.budget_refused(counter.scope, counter.metric, counter.period.name)
        retry_after = math.ceil((counter.period.resets_at - now).total_seconds())
        raise BudgetExceeded(
            counter.scope,
            counter.metric,
            counter.period.name,
            counter.limit,
            outcome.used,
            counter.period.resets_at.isoformat().replace("+00:00", "Z"),
            retry_after,
        )


def add(counters: Sequence[Counter], thresholds: Sequence[Threshold]) -> None:
    """Add what calls spent to the shared counters (ADD counters; from a background thread)."""
    if not counters:
        return
    backend = get_budgets()

    def during_outage() -> Outcome:
        metrics.record_dependency_error("redis")
        return _fallback.take_sync(counters, thresholds, lambda: None)

    _announce(counters, thresholds, _health.attempt_sync(lambda: backend.add(counters, thresholds), during_outage))


def seed(seeds: Sequence[Seed]) -> None:
    """Start the counters of ``seeds`` that do not exist yet (a live counter is never lowered)."""
    if not seeds:
        return
    backend = get_budgets()
    _health.attempt_sync(lambda: backend.seed(seeds), lambda: _fallback.seed(seeds))


def _announce(counters: Sequence[Counter], thresholds: Sequence[Threshold], outcome: Outcome) -> None:
    for index, used in outcome.crossed:
        threshold = thresholds[index]
        counter = counters[threshold.counter]
        budget_alerts.announce(
            budget_alerts.Crossing(
                tenant_pk=counter.tenant_pk,
                agent_pk=counter.agent_pk if counter.scope == "agent" else None,
                scope=counter.scope,
                budget_pk=threshold.budget.budget_pk,
                metric=counter.metric,
                period=counter.period.name,
                period_start=counter.period.start,
                resets_at=counter.period.resets_at,
                percent=threshold.budget.alert_percent,
                used=used,
                limit=threshold.budget.limit,
            )
        )


BUDGETS = "BUDGETS"  # the name of the backend (mcp_app.backends)
_health = Health(BUDGETS, "this process's own budget counters decide meanwhile")
_fallback = LocalBudgets()


def get_budgets() -> Any:
    """The ``BUDGETS`` backend of this process."""
    return backends[BUDGETS]
