"""The budget counters (``mcp_app.limits.budgets``) without the wire: the tenant's periods, and each backend's
check-and-count (``LocalBudgets`` always, ``RedisBudgets`` with ``REDIS_URL``): exact under concurrency, all or
nothing, thresholds crossed once, a Redis outage decided by the process's own counters.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, date, datetime
from typing import Any

import pytest

from mcp_app.limits import budgets
from mcp_app.limits.budgets import ADD, CHARGE, GATE, Counter, Threshold
from mcp_app.models.usage import BudgetLimit
from mcp_app.protocol.errors import BudgetExceeded


def test_a_day_ends_at_the_tenants_midnight_also_on_a_day_of_23_hours() -> None:
    spring = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)  # Paris moves to summer time at 02:00 that night
    day = budgets.period_of("day", "Europe/Paris", spring)
    assert (day.start, day.resets_at) == (date(2026, 3, 29), datetime(2026, 3, 29, 22, 0, tzinfo=UTC))
    late = budgets.period_of("day", "Europe/Paris", datetime(2026, 3, 29, 22, 30, tzinfo=UTC))
    assert late.start == date(2026, 3, 30)


def test_a_month_ends_on_the_first_of_the_next_in_the_tenants_time_zone() -> None:
    new_year_in_tokyo = datetime(2026, 12, 31, 16, 0, tzinfo=UTC)
    month = budgets.period_of("month", "Asia/Tokyo", new_year_in_tokyo)
    assert (month.start, month.resets_at) == (date(2027, 1, 1), datetime(2027, 1, 31, 15, 0, tzinfo=UTC))
    assert budgets.period_of("month", "UTC", new_year_in_tokyo).start == date(2026, 12, 1)
    assert budgets.period_of_day("month", "Asia/Tokyo", date(2027, 1, 15)).start == date(2027, 1, 1)


@pytest.fixture(params=["local", "redis"])
def backend(request: pytest.FixtureRequest, settings: Any) -> Any:
    if request.param == "local":
        return budgets.LocalBudgets()
    if not settings.REDIS_URL:
        pytest.skip("needs REDIS_URL")
    return budgets.RedisBudgets(settings.REDIS_URL, f"mcp:test:{uuid.uuid4().hex}")


def counter(key: str, mode: int, limit: float, amount: float) -> Counter:
    period = budgets.period_of("day", "UTC", datetime.now(UTC))
    return Counter(key, mode, limit, amount, 1, 2, "tenant", "calls", period)


async def take(backend: Any, counters: list[Counter], thresholds: tuple[Threshold, ...] = ()) -> budgets.Outcome:
    return await backend.take((), None, counters, list(thresholds))


async def test_calls_are_counted_exactly_under_concurrency_and_a_refusal_counts_nowhere(backend: Any) -> None:
    calls, other = counter("calls", CHARGE, 10, 1), counter("other", CHARGE, 1000, 1)
    outcomes = await asyncio.gather(*(take(backend, [other, calls]) for _ in range(50)))
    admitted = [outcome for outcome in outcomes if outcome.blocked is None]
    assert len(admitted) == 10
    assert {(outcome.blocked, outcome.used) for outcome in outcomes if outcome.blocked is not None} == {(1, 10.0)}
    probe = await take(backend, [counter("other", GATE, 10, 0)])
    assert (probe.blocked, probe.used) == (0, 10.0), "the 40 refused requests drew nothing from the other counter"


async def test_a_gate_refuses_once_its_counter_has_reached_the_limit_and_a_threshold_is_crossed_once(
    backend: Any,
) -> None:
    limit = BudgetLimit(1, "tenant", "tool_seconds", "day", 2.0, 80)
    added = counter("seconds", ADD, 2.0, 0.9)
    crossing = (Threshold(0, 1.6, limit),)
    assert (await take(backend, [added], crossing)).crossed == ()
    assert (await take(backend, [counter("seconds", GATE, 2.0, 0)])).blocked is None
    assert (await take(backend, [added], crossing)).crossed == ((0, pytest.approx(1.8)),)
    assert (await take(backend, [added], crossing)).crossed == (), "past the threshold: not crossed again"
    gate = await take(backend, [counter("seconds", GATE, 2.0, 0)])
    assert (gate.blocked, gate.used) == (0, pytest.approx(2.7))


def test_while_redis_is_unreachable_the_processs_own_counters_decide(use_backend: Any) -> None:
    from mcp_app.limits.rates import LocalRates

    use_backend("RATE_LIMITS", LocalRates())
    use_backend("BUDGETS", budgets.RedisBudgets("redis://127.0.0.1:1/0", f"mcp:test:{uuid.uuid4().hex}"))

    class Token:
        tenant_pk, agent_pk, time_zone = 10_001, 20_001, "UTC"
        budgets = (BudgetLimit(1, "agent", "calls", "day", 1.0, 80),)

    asyncio.run(budgets.take(Token(), (), 1))
    with pytest.raises(BudgetExceeded) as refused:
        asyncio.run(budgets.take(Token(), (), 1))
    assert (refused.value.scope, refused.value.data["used"]) == ("agent", 1)


async def test_a_seed_starts_a_missing_counter_and_never_lowers_a_live_one(backend: Any) -> None:
    period = budgets.period_of("day", "UTC", datetime.now(UTC))
    for _ in range(5):
        await take(backend, [counter("live", CHARGE, 100, 1)])
    backend.seed([budgets.Seed("live", 2.0, period.expire_at), budgets.Seed("new", 7.0, period.expire_at)])
    backend.seed([budgets.Seed("new", 3.0, period.expire_at)])
    live, new = await take(backend, [counter("live", GATE, 5, 0)]), await take(backend, [counter("new", GATE, 7, 0)])
    assert (live.blocked, live.used, new.blocked, new.used) == (0, 5.0, 0, 7.0)
