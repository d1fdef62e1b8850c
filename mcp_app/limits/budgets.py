"""Budgets at admission (docs/budgets.md): a ``tools/call`` over a budget of its tenant or agent is refused before
its tool runs, HTTP 429 with ``Retry-After`` until the period resets and JSON-RPC -32013 (``BudgetExceeded``).

- ``await take(token, buckets, calls)``: the request's rate buckets (``rates``) and its budgets in one step and,
  with Redis, one round trip: ``calls`` counted against every calls budget (checked and counted atomically, no
  overshoot), and refused while a tool-seconds or cost counter has reached its limit. Raises ``RateLimited`` or
  ``BudgetExceeded``; a refused request counts nowhere. The budgets come from the token's snapshot (no query).
- ``add(counters, thresholds)``: what ended calls spent, from ``budget_meter``'s flusher (never the request).
- Counters: one per scope (the tenant, or the agent), metric and period, named by the period's first day in the
  tenant's time zone (``period_of``), so a new period starts from zero; a key expires two days after its period.
  ``LocalBudgets`` (this process, the embedded default) or ``RedisBudgets`` (one Lua script that folds the rate
  buckets' check in, when both live in the same Redis). While Redis is unreachable, this process's counters
  decide, as the rates do.
- A threshold (``alert_percent`` of a limit) crossed by an increment is handed to ``budget_alerts``.

Not here: measuring a call (``usage``), the ledger, managing budgets (admin, API, CLI).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..backends import Health, RedisBacked, backends
from ..models.usage import BudgetLimit
from ..observability import metrics
from ..protocol.errors import BudgetExceeded
from . import budget_alerts, rates
from .rates import Bucket

GATE, CHARGE, ADD = 0, 1, 2  # refuse at the limit / count and refuse past it / count only
KEY_PREFIX = "mcp:budget"


def clock() -> datetime:
    """Now (UTC): which period a request falls in. Tests put their own clock in its place."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Period:
    name: str  # "day" or "month"
    start: date  # its first day, in the tenant's time zone
    resets_at: datetime  # when the next one starts (UTC)

    @property
    def expire_at(self) -> int:
        """When its counters may go (unix seconds): two days after its end, whatever the time zone."""
        end = self.start + timedelta(days=1) if self.name == "day" else _next_month(self.start)
        return int(datetime.combine(end + timedelta(days=2), time(), tzinfo=UTC).timestamp())


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _next_month(day: date) -> date:
    return (day.replace(day=1) + timedelta(days=32)).replace(day=1)


def period_of(name: str, time_zone: str, now: datetime) -> Period:
    """The ``name`` period ("day" or "month") of the tenant's ``time_zone`` that holds ``now``."""
    zone = _zone(time_zone)
    today = now.astimezone(zone).date()
    start, end = (today, today + timedelta(days=1)) if name == "day" else (today.replace(day=1), _next_month(today))
    return Period(name, start, datetime.combine(end, time(), tzinfo=zone).astimezone(UTC))


def period_of_day(name: str, time_zone: str, day: date) -> Period:
    """The ``name`` period that holds the tenant's ``day`` (what a ``Spent`` names)."""
    noon = datetime.combine(day, time(12), tzinfo=_zone(time_zone))
    return period_of(name, time_zone, noon)


@dataclass(frozen=True, slots=True)
class Counter:
    """One budget counter and what to do with it: ``mode`` GATE, CHARGE or ADD, by ``amount``, against ``limit``."""

    key: str
    mode: int
    limit: float
    amount: float
    tenant_pk: int
    agent_pk: int | None
    scope: str
    metric: str
    period: Period


@dataclass(frozen=True, slots=True)
class Threshold:
    """``alert_percent`` of ``budget``'s limit, on ``counters[counter]``."""

    counter: int
    value: float
    budget: BudgetLimit


@dataclass(frozen=True, slots=True)
class Outcome:
    rate_refused: tuple[int, float] | None = None
    blocked: int | None = None  # index of the counter that refused
    used: float = 0.0  # that counter's value
    crossed: tuple[tuple[int, float], ...] = ()  # thresholds crossed (index, counter's new value)


def counter_key(scope: str, owner: int, metric: str, period: Period) -> str:
    return f"{scope[0]}:{owner}:{metric}:{period.name}:{period.start.isoformat()}"


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


class LocalBudgets:
    """This process's counters, under a lock: the embedded default (each process counts its own calls)."""

    def __init__(self, **options: Any) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, tuple[float, int]] = {}  # key: (value, expires at, unix seconds)

    def folds(self, rate_backend: Any) -> bool:
        return isinstance(rate_backend, rates.LocalRates)

    async def take(
        self, buckets: Sequence[Bucket], rate_backend: Any, counters: Sequence[Counter], thresholds: Sequence[Threshold]
    ) -> Outcome:
        return self.take_sync(counters, thresholds, lambda: rate_backend.take_sync(buckets) if buckets else None)

    def add(self, counters: Sequence[Counter], thresholds: Sequence[Threshold]) -> Outcome:
        return self.take_sync(counters, thresholds, lambda: None)

    def take_sync(
        self,
        counters: Sequence[Counter],
        thresholds: Sequence[Threshold],
        take_rates: Callable[[], tuple[int, float] | None],
    ) -> Outcome:
        """Check every counter, then the rates (``take_rates`` draws them), then count: all or nothing."""
        with self._lock:
            now = clock().timestamp()
            used = [self._value(counter.key, now) for counter in counters]
            for index, (counter, value) in enumerate(zip(counters, used, strict=True)):
                if _blocks(counter, value):
                    return Outcome(blocked=index, used=value)
            refused = take_rates()
            if refused is not None:
                return Outcome(rate_refused=refused)
            after = list(used)
            for index, counter in enumerate(counters):
                if counter.mode != GATE and counter.amount:
                    after[index] = used[index] + counter.amount
                    self._values[counter.key] = (after[index], counter.period.expire_at)
            if len(self._values) > 100_000:
                self._values = {key: found for key, found in self._values.items() if found[1] > now}
            return Outcome(crossed=_crossed(thresholds, used, after))

    def _value(self, key: str, now: float) -> float:
        found = self._values.get(key)
        return 0.0 if found is None or found[1] <= now else found[0]


def _blocks(counter: Counter, value: float) -> bool:
    if counter.mode == GATE:
        return value >= counter.limit
    return counter.mode == CHARGE and value + counter.amount > counter.limit


def _crossed(thresholds: Sequence[Threshold], used: Sequence[float], after: Sequence[float]) -> tuple[Any, ...]:
    return tuple(
        (index, after[t.counter]) for index, t in enumerate(thresholds) if used[t.counter] < t.value <= after[t.counter]
    )


# KEYS: the rate buckets (``nr``, the last ARGV), then the counters. ARGV: the buckets' (``rates.RATE_CHECK``),
# the number of counters and per counter mode / limit (-1: none) / amount / expiry (unix s), the number of
# thresholds and per threshold counter index / value, then ``nr``. Returns {rate bucket refused, its wait,
# counter refused, its value, then per crossed threshold: index, the counter's new value}; nothing is written
# unless every bucket and counter admits. A spent budget is reported before a rate (as ``LocalBudgets`` does):
# its wait is the longer.
TAKE_SCRIPT = (
    "local nr = tonumber(ARGV[#ARGV])\n"
    + rates.RATE_CHECK
    + """
local at = 3 * nr + 1
local nb = tonumber(ARGV[at])
local used, after = {}, {}
local blocked, blocked_used = 0, 0
for j = 1, nb do
  local mode, limit, amount = tonumber(ARGV[at + 4 * j - 3]), tonumber(ARGV[at + 4 * j - 2]), tonumber(ARGV[at + 4 * j - 1])
  local value = tonumber(redis.call('GET', KEYS[nr + j]) or '0')
  used[j], after[j] = value, value
  if blocked == 0 and limit >= 0 and ((mode == 0 and value >= limit) or (mode == 1 and value + amount > limit)) then
    blocked, blocked_used = j, value
  end
end
if blocked > 0 then return {0, 0, blocked, tostring(blocked_used)} end
if refused > 0 then return {refused, math.ceil(wait), 0, '0'} end
"""
    + rates.RATE_COMMIT
    + """
for j = 1, nb do
  local mode, amount = tonumber(ARGV[at + 4 * j - 3]), tonumber(ARGV[at + 4 * j - 1])
  if mode ~= 0 and amount ~= 0 then
    after[j] = tonumber(redis.call('INCRBYFLOAT', KEYS[nr + j], ARGV[at + 4 * j - 1]))
    redis.call('EXPIREAT', KEYS[nr + j], ARGV[at + 4 * j])
  end
end
local answer = {0, 0, 0, '0'}
local tt = at + 4 * nb + 1
for t = 1, tonumber(ARGV[tt]) do
  local j, value = tonumber(ARGV[tt + 2 * t - 1]), tonumber(ARGV[tt + 2 * t])
  if used[j] < value and after[j] >= value then
    table.insert(answer, t)
    table.insert(answer, tostring(after[j]))
  end
end
return answer
"""
)


class RedisBudgets(RedisBacked):
    """Counters in Redis under ``prefix``, shared by every process that uses the same ``url``."""

    def __init__(self, url: str, prefix: str = KEY_PREFIX, **_: Any) -> None:
        super().__init__(url, prefix)

    def folds(self, rate_backend: Any) -> bool:
        return isinstance(rate_backend, rates.RedisRates) and rate_backend.same_server(self)

    async def take(
        self, buckets: Sequence[Bucket], rate_backend: Any, counters: Sequence[Counter], thresholds: Sequence[Threshold]
    ) -> Outcome:
        keys, args = rate_backend.script_input(buckets) if buckets else ([], [])
        own_keys, own_args = self._input(counters, thresholds)
        answer = await self._script(TAKE_SCRIPT)(keys=[*keys, *own_keys], args=[*args, *own_args, len(keys)])
        return _outcome(answer)

    def add(self, counters: Sequence[Counter], thresholds: Sequence[Threshold]) -> Outcome:
        keys, args = self._input(counters, thresholds)
        return _outcome(self._sync_script(TAKE_SCRIPT)(keys=keys, args=[*args, 0]))

    def _input(self, counters: Sequence[Counter], thresholds: Sequence[Threshold]) -> tuple[list[str], list[Any]]:
        args: list[Any] = [len(counters)]
        for counter in counters:
            args += [counter.mode, repr(counter.limit), repr(counter.amount), counter.period.expire_at]
        args.append(len(thresholds))
        for threshold in thresholds:
            args += [threshold.counter + 1, repr(threshold.value)]
        return [f"{self._prefix}:{counter.key}" for counter in counters], args


def _outcome(answer: Sequence[Any]) -> Outcome:
    refused, wait, blocked, used = int(answer[0]), float(answer[1]), int(answer[2]), float(answer[3])
    if refused:
        return Outcome(rate_refused=(refused - 1, wait))
    if blocked:
        return Outcome(blocked=blocked - 1, used=used)
    pairs = answer[4:]
    return Outcome(crossed=tuple((int(pairs[i]) - 1, float(pairs[i + 1])) for i in range(0, len(pairs), 2)))


BUDGETS = "BUDGETS"  # the name of the backend (mcp_app.backends)
_health = Health(BUDGETS, "this process's own budget counters decide meanwhile")
_fallback = LocalBudgets()


def get_budgets() -> Any:
    """The ``BUDGETS`` backend of this process."""
    return backends[BUDGETS]
