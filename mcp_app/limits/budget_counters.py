"""The budget counters' backends (docs/budgets.md): where each scope's, metric's and period's counter lives and the
one step that checks and counts them.

- ``Counter``: one counter and what to do with it: GATE (refuse once it has reached its limit), CHARGE (count
  ``amount`` and refuse if that would pass the limit) or ADD (count only); ``Threshold``: an alert share of a
  limit on one counter; ``Outcome``: what one step found (a rate bucket or a counter that refused, or the
  thresholds the increment crossed).
- ``take``/``take_sync``/``add``: check every counter (and the rate buckets handed in), then count, all or
  nothing. ``seed``: set counters that do not exist yet (never lowers a live one).
- ``LocalBudgets``: this process's counters under a lock (the embedded default, and every process's fallback
  while Redis is away). ``RedisBudgets``: keys under ``mcp:budget:`` and one Lua script that also checks and
  draws the rate buckets when they live in the same Redis. Keys expire two days after their period.

Not here: which counters a request touches (``budgets.plan``), the periods (``periods``), alerts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import RedisBacked
from ..models.usage import BudgetLimit
from . import rates
from .periods import Period
from .rates import Bucket

GATE, CHARGE, ADD = 0, 1, 2  # refuse at the limit / count and refuse past it / count only
KEY_PREFIX = "mcp:budget"


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


@dataclass(frozen=True, slots=True)
class Seed:
    """A counter's value to start from if it does not exist yet (what the ledger says was spent before)."""

    key: str
    value: float
    expire_at: int  # unix seconds: the counter's ``Period.expire_at``


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
            now = time.time()
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

    def seed(self, seeds: Sequence[Seed]) -> None:
        """Start each counter of ``seeds`` that does not exist (or has expired) at its value; a live one is kept."""
        with self._lock:
            now = time.time()
            for seed in seeds:
                found = self._values.get(seed.key)
                if found is None or found[1] <= now:
                    self._values[seed.key] = (seed.value, seed.expire_at)

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
# one string of space-separated fields (one argument, not one per field: redis-py encodes each argument on its
# own, and the fields were most of a warm call's cost of budgets): the number of counters and per counter mode /
# limit (-1: none) / amount / expiry (unix s), the number of thresholds and per threshold counter index / value;
# then ``nr``. Returns {rate bucket refused, its wait,
# counter refused, its value, then per crossed threshold: index, the counter's new value}; nothing is written
# unless every bucket and counter admits. A spent budget is reported before a rate (as ``LocalBudgets`` does):
# its wait is the longer.
TAKE_SCRIPT = (
    "local nr = tonumber(ARGV[#ARGV])\n"
    + rates.RATE_CHECK
    + """
local A = {}
for field in string.gmatch(ARGV[3 * nr + 1], '%S+') do A[#A + 1] = field end
local nb = tonumber(A[1])
local used, after = {}, {}
local blocked, blocked_used = 0, 0
for j = 1, nb do
  local mode, limit, amount = tonumber(A[4 * j - 2]), tonumber(A[4 * j - 1]), tonumber(A[4 * j])
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
  local mode, amount = tonumber(A[4 * j - 2]), tonumber(A[4 * j])
  if mode ~= 0 and amount ~= 0 then
    after[j] = tonumber(redis.call('INCRBYFLOAT', KEYS[nr + j], A[4 * j]))
    redis.call('EXPIREAT', KEYS[nr + j], A[4 * j + 1])
  end
end
local answer = {0, 0, 0, '0'}
local tt = 4 * nb + 2
for t = 1, tonumber(A[tt]) do
  local j, value = tonumber(A[tt + 2 * t - 1]), tonumber(A[tt + 2 * t])
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

    def seed(self, seeds: Sequence[Seed]) -> None:
        """``SET … NX EXAT``: a counter that exists already (a call counted since) is never lowered."""
        pipe = self._sync_client().pipeline(transaction=False)
        for seed in seeds:
            pipe.set(f"{self._prefix}:{seed.key}", repr(seed.value), nx=True, exat=seed.expire_at)
        pipe.execute()

    def _input(self, counters: Sequence[Counter], thresholds: Sequence[Threshold]) -> tuple[list[str], list[Any]]:
        fields: list[str] = [str(len(counters))]
        for counter in counters:
            fields += (str(counter.mode), repr(counter.limit), repr(counter.amount), str(counter.period.expire_at))
        fields.append(str(len(thresholds)))
        for threshold in thresholds:
            fields += (str(threshold.counter + 1), repr(threshold.value))
        return [f"{self._prefix}:{counter.key}" for counter in counters], [" ".join(fields)]


def _outcome(answer: Sequence[Any]) -> Outcome:
    refused, wait, blocked, used = int(answer[0]), float(answer[1]), int(answer[2]), float(answer[3])
    if refused:
        return Outcome(rate_refused=(refused - 1, wait))
    if blocked:
        return Outcome(blocked=blocked - 1, used=used)
    pairs = answer[4:]
    return Outcome(crossed=tuple((int(pairs[i]) - 1, float(pairs[i + 1])) for i in range(0, len(pairs), 2)))
