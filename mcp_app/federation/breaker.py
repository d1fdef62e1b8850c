"""A circuit breaker per upstream MCP server, shared by every process through Redis (in-process without it).

By the upstream's primary key: ``admit(pk)`` (an ``Admission``: allowed, or ``retry_after`` seconds),
``succeeded(pk)`` / ``failed(pk, source)`` (what became of an admitted call: failures of the upstream only, never
an ``isError`` result), ``state``/``states``/``open_breakers`` (for the admin and ``/readyz``) and ``reset(pk)``.
The ``BREAKERS`` backend is ``RedisBreakers`` (Lua on Redis's clock) or ``LocalBreakers`` (embedded); while Redis
is unreachable every call is admitted. Design: docs/upstreams.md. Not here: what counts as a failure, timeouts.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ..backends import REDIS_NOW, Health, RedisBacked, backends, redis_ms
from ..conf import mcp_settings

logger = logging.getLogger("mcp_app.federation.breaker")

Status = Literal["closed", "open", "half-open"]
CLOSED: Status = "closed"
OPEN: Status = "open"
HALF_OPEN: Status = "half-open"

# How long one half-open probe holds its turn at most: the default call timeout is what a probe may rightly take.
PROBE_LEASE_SECONDS = 60.0
# An idle breaker's Redis keys expire this long after its last change (an open one is kept past its cool-down).
IDLE_EXPIRY_SECONDS = 86400.0


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a call may go to the upstream; if not, after how many seconds to try again. ``probe``: this call
    is the one half-open probe (its outcome closes or re-opens the breaker)."""

    allowed: bool
    retry_after: float = 0.0
    probe: bool = False


ALLOWED = Admission(True)


@dataclass(frozen=True, slots=True)
class BreakerState:
    """What an operator sees: the status, the failures counted (within the window while closed; those that
    opened it, plus failed probes, while open), and until when it is open (``None`` while closed)."""

    status: Status
    failures: int = 0
    open_until: datetime | None = None


CLOSED_STATE = BreakerState(CLOSED)


@dataclass(frozen=True, slots=True)
class Policy:
    failures: int
    window: float
    cooldown: float
    probe_lease: float

    @classmethod
    def current(cls) -> Policy:
        cooldown = float(mcp_settings.UPSTREAM_BREAKER_COOLDOWN_SECONDS)
        return cls(
            failures=int(mcp_settings.UPSTREAM_BREAKER_FAILURES),
            window=float(mcp_settings.UPSTREAM_BREAKER_WINDOW_SECONDS),
            cooldown=cooldown,
            probe_lease=max(cooldown, PROBE_LEASE_SECONDS),
        )


def _status(open_until: float, now: float) -> Status:
    if not open_until:
        return CLOSED
    return OPEN if now < open_until else HALF_OPEN


# -- in this process ------------------------------------------------------------------------------------------


@dataclass
class _Local:
    failures: dict[str, float] = field(default_factory=dict)  # member -> monotonic time, within the window
    open_until: float = 0.0  # monotonic; 0: closed
    open_until_wall: datetime | None = None  # the same moment, for operators
    opened_failures: int = 0
    probe_until: float = 0.0


class LocalBreakers:
    """The breakers in this process's memory (the embedded default: each process judges by its own calls)."""

    def __init__(self, **_options: Any) -> None:
        self._lock = threading.Lock()
        self._breakers: dict[int, _Local] = {}

    async def admit(self, pk: int, policy: Policy) -> Admission:
        with self._lock:
            breaker = self._breakers.get(pk)
            if breaker is None or not breaker.open_until:
                return ALLOWED
            now = time.monotonic()
            if now < breaker.open_until:
                return Admission(False, breaker.open_until - now)
            if breaker.probe_until > now:
                return Admission(False, min(breaker.probe_until - now, policy.cooldown))
            breaker.probe_until = now + policy.probe_lease
            return Admission(True, probe=True)

    async def succeeded(self, pk: int, policy: Policy) -> bool:
        with self._lock:
            breaker = self._breakers.get(pk)
            if breaker is None or _status(breaker.open_until, time.monotonic()) != HALF_OPEN:
                return False
            del self._breakers[pk]
            return True

    async def failed(self, pk: int, policy: Policy, member: str | None = None) -> int:
        """0: counted; 1: it opened; 2: a failed probe re-opened it; 3: open already (a late failure). Failures
        of one ``member`` count once within the window."""
        with self._lock:
            now = time.monotonic()
            breaker = self._breakers.setdefault(pk, _Local())
            if breaker.open_until:
                if now < breaker.open_until:
                    return 3
                self._open(breaker, now, policy)
                breaker.opened_failures += 1
                breaker.probe_until = 0.0
                return 2
            self._expire(breaker, now, policy)
            key = member or uuid.uuid4().hex
            breaker.failures.pop(key, None)
            breaker.failures[key] = now
            if len(breaker.failures) < policy.failures:
                return 0
            self._open(breaker, now, policy)
            breaker.opened_failures = len(breaker.failures)
            breaker.failures.clear()
            return 1

    @staticmethod
    def _open(breaker: _Local, now: float, policy: Policy) -> None:
        breaker.open_until = now + policy.cooldown
        breaker.open_until_wall = datetime.now(UTC) + timedelta(seconds=policy.cooldown)

    @staticmethod
    def _expire(breaker: _Local, now: float, policy: Policy) -> None:
        breaker.failures = {key: at for key, at in breaker.failures.items() if at > now - policy.window}

    def states(self, pks: list[int], policy: Policy) -> dict[int, BreakerState]:
        with self._lock:
            now = time.monotonic()
            found: dict[int, BreakerState] = {}
            for pk in pks:
                breaker = self._breakers.get(pk)
                if breaker is None:
                    found[pk] = CLOSED_STATE
                elif breaker.open_until:
                    status = _status(breaker.open_until, now)
                    found[pk] = BreakerState(status, breaker.opened_failures, breaker.open_until_wall)
                else:
                    self._expire(breaker, now, policy)
                    found[pk] = BreakerState(CLOSED, len(breaker.failures))
            return found

    def open_breakers(self, policy: Policy) -> dict[int, BreakerState]:
        with self._lock:
            pks = [pk for pk, breaker in self._breakers.items() if breaker.open_until]
        return self.states(pks, policy)

    def reset(self, pk: int) -> None:
        with self._lock:
            self._breakers.pop(pk, None)


# -- in Redis -------------------------------------------------------------------------------------------------

# Every script reads the time from Redis itself (REDIS_NOW). Per upstream: a hash (open_until, failures,
# probe_until; absent: closed with no open history) and a sorted set of failure times within the window; one
# sorted set of the open breakers (pk scored by open_until) for /readyz.
# KEYS: hash. ARGV: probe lease (ms), cool-down (ms). Returns {1, 0} allowed, {2, 0} allowed as the probe,
# {0, wait ms} refused.
ADMIT_SCRIPT = (
    REDIS_NOW
    + """
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
if open_until == 0 then return {1, 0} end
if now < open_until then return {0, open_until - now} end
local probe_until = tonumber(redis.call('HGET', KEYS[1], 'probe_until') or '0')
if probe_until > now then return {0, math.min(probe_until - now, tonumber(ARGV[2]))} end
redis.call('HSET', KEYS[1], 'probe_until', now + tonumber(ARGV[1]))
return {2, 0}
"""
)
# KEYS: hash, failures, open set. ARGV: pk. Returns 1 when a half-open breaker closed, else 0.
SUCCEEDED_SCRIPT = (
    REDIS_NOW
    + """
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
if open_until == 0 or now < open_until then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"""
)
# KEYS: hash, failures, open set. ARGV: pk, failures to open, window (ms), cool-down (ms), a unique member,
# idle expiry (ms). Returns 0 counted, 1 opened, 2 re-opened (a failed probe), 3 open already.
FAILED_SCRIPT = (
    REDIS_NOW
    + """
local cooldown = tonumber(ARGV[4])
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
local outcome = 1
local failures
if open_until > 0 then
  if now < open_until then return 3 end
  failures = tonumber(redis.call('HGET', KEYS[1], 'failures') or '0') + 1
  redis.call('HDEL', KEYS[1], 'probe_until')
  outcome = 2
else
  local window = tonumber(ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  redis.call('ZADD', KEYS[2], now, ARGV[5])
  failures = redis.call('ZCARD', KEYS[2])
  if failures < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[2], window)
    return 0
  end
  redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[1], 'open_until', now + cooldown, 'failures', failures)
redis.call('PEXPIRE', KEYS[1], cooldown + tonumber(ARGV[6]))
redis.call('ZADD', KEYS[3], now + cooldown, ARGV[1])
return outcome
"""
)
# KEYS: hash and failures of each breaker, in pairs. ARGV: window (ms). Returns {now, {open_until, failures}...}
# (open_until 0: closed, and failures are those within the window).
STATES_SCRIPT = (
    REDIS_NOW
    + """
local found = {now}
for i = 1, #KEYS, 2 do
  local open_until = tonumber(redis.call('HGET', KEYS[i], 'open_until') or '0')
  local failures
  if open_until > 0 then
    failures = tonumber(redis.call('HGET', KEYS[i], 'failures') or '0')
  else
    failures = redis.call('ZCOUNT', KEYS[i + 1], '(' .. (now - tonumber(ARGV[1])), '+inf')
  end
  found[#found + 1] = {open_until, failures}
end
return found
"""
)
# KEYS: open set. ARGV: prefix. Returns {now, {pk, open_until, failures}...} of the breakers still open or
# half-open; members whose breaker closed by expiry are removed.
OPEN_SCRIPT = (
    REDIS_NOW
    + """
local found = {now}
for _, pk in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local values = redis.call('HMGET', ARGV[1] .. ':' .. pk, 'open_until', 'failures')
  if values[1] then
    found[#found + 1] = {pk, tonumber(values[1]), tonumber(values[2] or '0')}
  else
    redis.call('ZREM', KEYS[1], pk)
  end
end
return found
"""
)
# KEYS: hash, failures, open set. ARGV: pk.
RESET_SCRIPT = """
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"""


def _datetime(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class RedisBreakers(RedisBacked):
    """The breakers in Redis under ``prefix``, shared by every process that uses the same ``url``."""

    def __init__(self, url: str, prefix: str = "mcp:breaker", **_options: Any) -> None:
        super().__init__(url, prefix)

    def _keys(self, pk: int) -> list[str]:
        return [f"{self._prefix}:{pk}", f"{self._prefix}:{pk}:failures", f"{self._prefix}:open"]

    async def admit(self, pk: int, policy: Policy) -> Admission:
        verdict, wait = await self._script(ADMIT_SCRIPT)(
            keys=self._keys(pk)[:1], args=[redis_ms(policy.probe_lease), redis_ms(policy.cooldown)]
        )
        if int(verdict) == 0:
            return Admission(False, int(wait) / 1000)
        return Admission(True, probe=int(verdict) == 2)

    async def succeeded(self, pk: int, policy: Policy) -> bool:
        return bool(int(await self._script(SUCCEEDED_SCRIPT)(keys=self._keys(pk), args=[pk])))

    async def failed(self, pk: int, policy: Policy, member: str | None = None) -> int:
        args = [
            pk,
            policy.failures,
            redis_ms(policy.window),
            redis_ms(policy.cooldown),
            member or uuid.uuid4().hex,  # one member's failures are one ZADD member: counted once
            redis_ms(IDLE_EXPIRY_SECONDS),
        ]
        return int(await self._script(FAILED_SCRIPT)(keys=self._keys(pk), args=args))

    def states(self, pks: list[int], policy: Policy) -> dict[int, BreakerState]:
        if not pks:
            return {}
        keys = [key for pk in pks for key in self._keys(pk)[:2]]
        now, *rows = self._sync_script(STATES_SCRIPT)(keys=keys, args=[redis_ms(policy.window)])
        found: dict[int, BreakerState] = {}
        for pk, (open_until, failures) in zip(pks, rows, strict=True):
            until = int(open_until)
            status = _status(until, int(now))
            found[pk] = BreakerState(status, int(failures), _datetime(until) if until else None)
        return found

    def open_breakers(self, policy: Policy) -> dict[int, BreakerState]:
        now, *rows = self._sync_script(OPEN_SCRIPT)(keys=self._keys(0)[2:], args=[self._prefix])
        return {
            int(pk): BreakerState(_status(int(until), int(now)), int(failures), _datetime(int(until)))
            for pk, until, failures in rows
        }

    def reset(self, pk: int) -> None:
        self._sync_script(RESET_SCRIPT)(keys=self._keys(pk), args=[pk])


# -- the module's verbs ----------------------------------------------------------------------------------------

BREAKERS = "BREAKERS"  # the name of the backend (mcp_app.backends)
_health = Health(BREAKERS, "calls are not held back until it is available again")


def breakers() -> LocalBreakers | RedisBreakers:
    """The ``BREAKERS`` backend of this process."""
    found: LocalBreakers | RedisBreakers = backends[BREAKERS]
    return found


# A process that found a breaker closed admits calls for this long without asking again (no round trip on the
# hot path); its own failures forget that at once, another process's open breaker reaches it within this bound.
CLOSED_REUSE_SECONDS = 1.0
_closed_at: dict[int, float] = {}


async def admit(pk: int) -> Admission:
    """Whether a call may go to upstream ``pk`` now (see the module docstring)."""
    policy = Policy.current()
    if policy.failures < 1:
        return ALLOWED
    seen = _closed_at.get(pk)
    if seen is not None and time.monotonic() - seen < CLOSED_REUSE_SECONDS:
        return ALLOWED
    admission = await _health.attempt(breakers().admit(pk, policy), lambda: ALLOWED)
    if admission.allowed and not admission.probe:
        _closed_at[pk] = time.monotonic()
    else:
        _closed_at.pop(pk, None)
    return admission


async def succeeded(pk: int) -> None:
    """An admitted call to upstream ``pk`` succeeded: a half-open breaker closes."""
    policy = Policy.current()
    if policy.failures < 1:
        return
    if await _health.attempt(breakers().succeeded(pk, policy), lambda: False):
        logger.info("upstream %s: circuit breaker closed (the probe succeeded)", pk)


async def failed(pk: int, source: str | None = None) -> None:
    """An admitted call to upstream ``pk`` failed: enough failures within the window open the breaker, a failed
    probe re-opens it. One ``source``'s failures (an agent whose calls time out) count once within the window."""
    _closed_at.pop(pk, None)
    policy = Policy.current()
    if policy.failures < 1:
        return
    member = f"source:{source}" if source else None
    outcome = await _health.attempt(breakers().failed(pk, policy, member), lambda: 0)
    if outcome == 1:
        logger.warning(
            "upstream %s: circuit breaker opened after %d failures within %g s; calls fail for %g s",
            pk,
            policy.failures,
            policy.window,
            policy.cooldown,
        )
    elif outcome == 2:
        logger.warning("upstream %s: circuit breaker re-opened (the probe failed) for %g s", pk, policy.cooldown)


def states(pks: list[int] | tuple[int, ...] | set[int]) -> dict[int, BreakerState]:
    """The state of each breaker (closed when the shared state cannot be read: it does not hold calls back)."""
    asked = list(pks)
    closed = dict.fromkeys(asked, CLOSED_STATE)
    return _health.attempt_sync(lambda: breakers().states(asked, Policy.current()), lambda: closed)


def state(pk: int) -> BreakerState:
    return states([pk])[pk]


def open_breakers() -> dict[int, BreakerState]:
    """Every breaker that is open or half-open (without knowing the upstreams: one read, no query)."""
    return _health.attempt_sync(lambda: breakers().open_breakers(Policy.current()), dict)


def reset(pk: int) -> None:
    """Close upstream ``pk``'s breaker now and forget its failures. Raises if the shared state is unreachable
    (the operator asked for a change that could not be made)."""
    breakers().reset(pk)
    logger.info("upstream %s: circuit breaker closed by an operator", pk)
