"""The Redis backend of the leases (``limits.quotas``; the backends ``WORKER_QUOTAS`` and ``STREAM_CAPS`` name it
as ``mcp_app.limits.quotas.RedisQuotas``): two sorted sets per call (the tenant's and the agent's, scored by
expiry in Redis's own clock) and a lease key naming them, changed only by the Lua scripts below.
"""

from __future__ import annotations

from typing import Any

from ..backends import REDIS_NOW, RedisBacked, redis_ms

_EXTEND = """
for i = 1, 2 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
"""
# KEYS: tenant set, agent set, lease key. ARGV: call id, tenant limit, agent limit, ttl (ms), lease value.
# Returns '' when admitted, else the scope that is full.
ACQUIRE_SCRIPT = (
    REDIS_NOW
    + """
local ttl = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local tenant_limit = tonumber(ARGV[2])
  if tenant_limit > 0 and redis.call('ZCARD', KEYS[1]) >= tenant_limit then return 'tenant' end
  local agent_limit = tonumber(ARGV[3])
  if agent_limit > 0 and redis.call('ZCARD', KEYS[2]) >= agent_limit then return 'agent' end
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
redis.call('SET', KEYS[3], ARGV[5], 'PX', ttl)
"""
    + _EXTEND
    + "return ''\n"
)
# KEYS: tenant set, agent set, lease key. ARGV: call id, ttl (ms). 1: renewed; 0: the lease had gone.
RENEW_SCRIPT = (
    REDIS_NOW
    + """
local ttl = tonumber(ARGV[2])
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not expiry) or tonumber(expiry) <= now then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
redis.call('ZADD', KEYS[2], 'XX', now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[3], ttl)
"""
    + _EXTEND
    + "return 1\n"
)
# KEYS: tenant set, agent set, lease key. ARGV: call id.
RELEASE_SCRIPT = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
"""
# KEYS: sets to count. Returns the number of unexpired members of each.
COUNT_SCRIPT = (
    REDIS_NOW
    + """
local counts = {}
for i, key in ipairs(KEYS) do counts[i] = redis.call('ZCOUNT', key, '(' .. now, '+inf') end
return counts
"""
)


class RedisQuotas(RedisBacked):
    """Leases in Redis, shared by every process that uses the same ``url`` and ``prefix``."""

    def __init__(self, url: str, prefix: str = "mcp:quota", **_: Any) -> None:
        super().__init__(url, prefix)

    def _keys(self, call_id: str, tenant_pk: int, agent_pk: int) -> list[str]:
        return [
            f"{self._prefix}:tenant:{tenant_pk}",
            f"{self._prefix}:agent:{agent_pk}",
            f"{self._prefix}:lease:{call_id}",
        ]

    async def check(self) -> None:
        """Raise unless Redis answers."""
        await self._client().ping()

    async def acquire(
        self, call_id: str, tenant_pk: int, agent_pk: int, tenant_limit: int, agent_limit: int, ttl: float
    ) -> str | None:
        answer = await self._script(ACQUIRE_SCRIPT)(
            keys=self._keys(call_id, tenant_pk, agent_pk),
            args=[call_id, tenant_limit, agent_limit, redis_ms(ttl), f"{tenant_pk} {agent_pk}"],
        )
        scope = answer.decode() if isinstance(answer, bytes) else str(answer or "")
        return scope or None

    async def renew(self, call_id: str, tenant_pk: int, agent_pk: int, ttl: float) -> bool:
        answer = await self._script(RENEW_SCRIPT)(
            keys=self._keys(call_id, tenant_pk, agent_pk), args=[call_id, redis_ms(ttl)]
        )
        return bool(int(answer))

    async def release(self, call_id: str, tenant_pk: int, agent_pk: int) -> None:
        await self._script(RELEASE_SCRIPT)(keys=self._keys(call_id, tenant_pk, agent_pk), args=[call_id])

    def release_sync(self, call_id: str) -> None:
        client = self._sync_client()
        value = client.get(f"{self._prefix}:lease:{call_id}")
        if value is None:
            return  # released already, or expired (and with it the call's members of both sets)
        tenant_pk, agent_pk = (int(part) for part in value.split())
        self._sync_script(RELEASE_SCRIPT)(keys=self._keys(call_id, tenant_pk, agent_pk), args=[call_id])

    def running(self, tenants: list[int], agents: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        keys = [f"{self._prefix}:tenant:{pk}" for pk in tenants] + [f"{self._prefix}:agent:{pk}" for pk in agents]
        if not keys:
            return {}, {}
        counts = [int(count) for count in self._sync_script(COUNT_SCRIPT)(keys=keys, args=[])]
        split = len(tenants)
        return dict(zip(tenants, counts[:split], strict=True)), dict(zip(agents, counts[split:], strict=True))
