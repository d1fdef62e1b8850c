"""Request rates per tenant, per agent and per tool: token buckets shared by every process (docs/limits.md).

- ``limit_of(own_rate, own_burst, default_rate, default_burst)``: the effective ``Limit`` of one scope, or
  ``None`` when unlimited (the own rate wins over the setting; an empty burst: the setting's, or twice the rate).
- ``request_buckets(token, tools=..., cost=...)``: the buckets one request draws from (cached snapshots, no query).
- ``await take(buckets)`` / ``take_sync(buckets)``: draw from every bucket or none, else raise ``RateLimited``
  (-32011) naming the scope that waits longest; while ``RATE_LIMITS`` is unreachable, this process's buckets decide.

The algorithm is GCRA (one theoretical arrival time per bucket; cost ``n`` admitted when
``max(tat, now) + n/rate - now <= burst/rate``): ``LocalRates`` in memory, ``RedisRates`` in one Lua script.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import Health, RedisBacked, backends
from ..conf import mcp_settings
from ..observability import metrics
from ..protocol.errors import RateLimited

__all__ = [
    "Bucket",
    "Limit",
    "LocalRates",
    "RateLimited",
    "RedisRates",
    "limit_of",
    "request_buckets",
    "take",
    "take_sync",
]

TENANT = "tenant"
AGENT = "agent"
TOOL = "tool"


@dataclass(frozen=True, slots=True)
class Limit:
    rate: float  # requests per second, > 0
    burst: int  # requests that may arrive at once, >= 1

    @property
    def interval_ms(self) -> float:
        return 1000.0 / self.rate


@dataclass(frozen=True, slots=True)
class Bucket:
    scope: str  # "tenant", "agent" or "tool"; "address" or "token" for failed authentications (bruteforce)
    key: str  # the bucket's name within its backend
    limit: Limit
    cost: int = 1


def limit_of(own_rate: float | None, own_burst: int | None, default_rate: float, default_burst: int) -> Limit | None:
    rate = float(default_rate if own_rate is None else own_rate)
    if rate <= 0:
        return None
    if own_burst:
        burst = int(own_burst)
    elif own_rate is None:
        burst = int(default_burst)
    else:
        burst = math.ceil(2 * rate)
    return Limit(rate, max(1, burst))


def request_buckets(token: Any, *, tools: Iterable[Any] = (), cost: int = 1) -> list[Bucket]:
    """The buckets a request of ``token`` (a ``TokenEntry``) draws from: its tenant's, its agent's, and one per
    tool it calls (``ToolDescriptor``; one token per call). Settings and cached snapshots only: no query."""
    settings = mcp_settings
    buckets: list[Bucket] = []
    tenant_rate, tenant_burst = token.tenant_rate
    tenant = limit_of(tenant_rate, tenant_burst, settings.RATE_LIMIT_PER_TENANT, settings.RATE_BURST_PER_TENANT)
    if tenant is not None:
        buckets.append(Bucket(TENANT, f"t:{token.tenant_pk}", tenant, cost))
    agent_rate, agent_burst = token.agent_rate
    agent = limit_of(agent_rate, agent_burst, settings.RATE_LIMIT_PER_AGENT, settings.RATE_BURST_PER_AGENT)
    if agent is not None:
        buckets.append(Bucket(AGENT, f"a:{token.agent_pk}", agent, cost))
    counted: dict[int, int] = {}
    limits: dict[int, Limit] = {}
    for tool in tools:
        if tool.ref is None:
            continue
        own_rate, own_burst = tool.rate_limit or (None, None)
        limit = limit_of(own_rate, own_burst, settings.RATE_LIMIT_PER_TOOL, settings.RATE_BURST_PER_TOOL)
        if limit is not None:
            counted[tool.ref] = counted.get(tool.ref, 0) + 1
            limits[tool.ref] = limit
    buckets += [Bucket(TOOL, f"x:{ref}", limits[ref], count) for ref, count in counted.items()]
    return buckets


async def take(buckets: Sequence[Bucket]) -> None:
    """Draw from every bucket or none; raise ``RateLimited``, see the module docstring."""
    if not buckets:
        return
    _refuse(buckets, await _health.attempt(get_rates().take(buckets), lambda: _outage(buckets)))


def take_sync(buckets: Sequence[Bucket]) -> None:
    """``take`` for synchronous code (a Django view): the same buckets in the same backend, without a loop."""
    if not buckets:
        return
    _refuse(buckets, _health.attempt_sync(lambda: get_rates().take_sync(buckets), lambda: _outage(buckets)))


def _outage(buckets: Sequence[Bucket]) -> tuple[int, float] | None:
    # Not silently lifted, not a 503 for every call: this process's own buckets hold the limits meanwhile.
    metrics.record_dependency_error("redis")
    return _fallback.take_sync(buckets)


def take_during_outage(buckets: Sequence[Bucket]) -> tuple[int, float] | None:
    """What ``take`` answers while ``RATE_LIMITS`` is unreachable (for ``budgets``, which folds the buckets into
    its own round trip): this process's buckets, the outage counted."""
    return _outage(buckets) if buckets else None


def refuse(buckets: Sequence[Bucket], refused: tuple[int, float] | None) -> None:
    """Raise ``RateLimited`` for what a backend's ``take`` answered, unless it admitted the request."""
    _refuse(buckets, refused)


def _refuse(buckets: Sequence[Bucket], refused: tuple[int, float] | None) -> None:
    if refused is not None:
        index, wait_ms = refused
        bucket = buckets[index]
        metrics.rate_limited(bucket.scope)
        raise RateLimited(bucket.scope, max(1, math.ceil(wait_ms)), bucket.limit.rate, bucket.limit.burst)


def _cost(bucket: Bucket) -> int:
    return max(1, min(bucket.cost, bucket.limit.burst))  # a batch larger than the burst may still pass, alone


class LocalRates:
    """This process's memory, under a lock: the embedded default (each process counts its own requests)."""

    MAX_BUCKETS = 100_000

    def __init__(self, **options: Any) -> None:
        self._lock = threading.Lock()
        self._tats: dict[str, float] = {}

    async def take(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        return self.take_sync(buckets)

    def take_sync(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        with self._lock:
            now = time.monotonic() * 1000.0
            new: list[float] = []
            refused: tuple[int, float] | None = None
            for index, bucket in enumerate(buckets):
                interval = bucket.limit.interval_ms
                tat = max(self._tats.get(bucket.key, now), now) + interval * _cost(bucket)
                over = tat - now - interval * bucket.limit.burst
                if over > 0 and (refused is None or over > refused[1]):
                    refused = (index, over)
                new.append(tat)
            if refused is not None:
                return refused
            for bucket, tat in zip(buckets, new, strict=True):
                self._tats[bucket.key] = tat
            if len(self._tats) > self.MAX_BUCKETS:  # full buckets are the same as absent ones
                self._tats = {key: tat for key, tat in self._tats.items() if tat > now}
            return None


# The check of the buckets, a fragment that ``budgets`` folds into its own script: ``nr`` buckets, KEYS[1..nr],
# ARGV per bucket interval (ms) / burst / cost. Sets ``refused`` (1-based index of the bucket that must wait
# longest, 0: every bucket admits) and ``wait`` (ms); ``RATE_COMMIT`` then updates every bucket. The time is
# Redis's own.
RATE_CHECK = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local tats = {}
local refused, wait = 0, 0
for i = 1, nr do
  local interval = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  tat = tat + interval * tonumber(ARGV[3 * i])
  local over = tat - now - interval * burst
  if over > 0 and over > wait then refused, wait = i, over end
  tats[i] = tat
end
"""
RATE_COMMIT = """
for i = 1, nr do
  redis.call('SET', KEYS[i], string.format('%.3f', tats[i]), 'PX', math.ceil(tats[i] - now) + 1)
end
"""
# Every bucket of KEYS. Returns {0, 0} when every bucket admits the request (and then updates all of them), else
# {index (1-based) of the bucket that must wait longest, wait in ms rounded up}.
TAKE_SCRIPT = (
    "local nr = #KEYS\n"
    + RATE_CHECK
    + "if refused > 0 then return {refused, math.ceil(wait)} end\n"
    + RATE_COMMIT
    + "return {0, 0}\n"
)


KEY_PREFIX = "mcp:rate"  # RedisRates' default: a bucket ``key`` is the Redis key ``mcp:rate:<key>``


class RedisRates(RedisBacked):
    """Buckets in Redis under ``prefix``, shared by every process that uses the same ``url``."""

    def __init__(self, url: str, prefix: str = KEY_PREFIX, **_: Any) -> None:
        super().__init__(url, prefix)

    async def take(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        index, wait = await self._script(TAKE_SCRIPT)(keys=self._keys(buckets), args=self._args(buckets))
        return None if int(index) == 0 else (int(index) - 1, float(wait))

    def take_sync(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        """``take`` from synchronous code, over the process's blocking client (thread-safe)."""
        index, wait = self._sync_script(TAKE_SCRIPT)(keys=self._keys(buckets), args=self._args(buckets))
        return None if int(index) == 0 else (int(index) - 1, float(wait))

    def _keys(self, buckets: Sequence[Bucket]) -> list[str]:
        return [f"{self._prefix}:{bucket.key}" for bucket in buckets]

    def script_input(self, buckets: Sequence[Bucket]) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of ``RATE_CHECK`` for ``buckets`` (``budgets`` folds them into its script)."""
        return self._keys(buckets), self._args(buckets)

    @staticmethod
    def _args(buckets: Sequence[Bucket]) -> list[Any]:
        args: list[Any] = []
        for bucket in buckets:
            args += [repr(bucket.limit.interval_ms), bucket.limit.burst, _cost(bucket)]
        return args


RATE_LIMITS = "RATE_LIMITS"  # the name of the backend (mcp_app.backends)
_health = Health(RATE_LIMITS, "this process's own rate buckets decide meanwhile")
_fallback = LocalRates()  # this process's buckets while the shared backend is unreachable


def get_rates() -> Any:
    """The ``RATE_LIMITS`` backend of this process."""
    return backends[RATE_LIMITS]
