"""channels-redis with fewer round trips: ``send`` in one, ``group_send`` in two, ``group_add`` in one, and the
``group_add`` and ``group_discard`` calls of one turn of the event loop together in one (``redis_pool.pipelined``:
a burst of streams joining or leaving their groups costs one round trip, not one each) (docs/robustness.md,
"Redis as channel layer"; measured in docs/workers.md).

``RedisChannelLayer`` is channels-redis's own layer (same keys, messages, expiry and capacity: it talks to the stock
one both ways) with its writes batched and its pools (one per event loop) ``redis_pool.BoundedConnectionPool``,
not channels-redis's own, which keeps every connection it ever opened. Receiving is unchanged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels_redis.core import RedisChannelLayer as StockRedisChannelLayer

from .redis_pool import pipelined

logger = logging.getLogger("mcp_app.channel_layer")

# KEYS[1]: the channel's key. ARGV: message, now, capacity, expiry in seconds. 0 when full, else 1.
SEND = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, math.floor(tonumber(ARGV[2])) - tonumber(ARGV[4]))
if redis.call('ZCOUNT', KEYS[1], '-inf', '+inf') >= tonumber(ARGV[3]) then
    return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""

# KEYS: channel keys. ARGV: one message per key, one capacity per key, now, expiry. Returns how many were full.
GROUP_SEND = """
local over_capacity = 0
local now = ARGV[#ARGV - 1]
local expiry = tonumber(ARGV[#ARGV])
for i = 1, #KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, math.floor(tonumber(now)) - expiry)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[i + #KEYS]) then
        redis.call('ZADD', KEYS[i], now, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""


class RedisChannelLayer(StockRedisChannelLayer):
    """channels-redis's layer with its writes batched and its pools bounded (see the module docstring)."""

    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        if "address" not in host:  # Sentinel or separate host/port options: channels-redis's own pool
            return super().create_pool(index)
        from .redis_pool import bounded_pool

        return bounded_pool(host.pop("address"), **host)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "message is not a dict"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        assert "__asgi_channel__" not in message
        key_name = channel
        if "!" in channel:  # a process-local channel: the message names its full name
            message = {**message, "__asgi_channel__": channel}
            key_name = self.non_local_name(channel)
            index = self.consistent_hash(channel)
        else:
            index = next(self._send_index_generator)
        added = await self.connection(index).eval(
            SEND,
            1,
            self.prefix + key_name,
            self.serialize(message),
            time.time(),
            self.get_capacity(channel),
            int(self.expiry),
        )
        if not added:
            raise ChannelFull()

    async def group_add(self, group: str, channel: str) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        key = self._group_key(group)
        connection = self.connection(self.consistent_hash(group))
        await pipelined(connection, ("ZADD", key, time.time(), channel), ("EXPIRE", key, self.group_expiry))

    async def group_discard(self, group: str, channel: str) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        key = self._group_key(group)
        await pipelined(self.connection(self.consistent_hash(group)), ("ZREM", key, channel))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        key = self._group_key(group)
        pipe = self.connection(self.consistent_hash(group)).pipeline(transaction=False)
        pipe.zremrangebyscore(key, min=0, max=int(time.time()) - self.group_expiry)
        pipe.zrange(key, 0, -1)
        _dropped, members = await pipe.execute()
        if not members:
            return
        names = [member.decode("utf8") for member in members]
        keys_by_connection, message_by_key, capacity_by_key = self._map_channel_keys_to_connection(names, message)
        for index, keys in keys_by_connection.items():
            full = await self.connection(index).eval(
                GROUP_SEND,
                len(keys),
                *keys,
                *(message_by_key[key] for key in keys),
                *(capacity_by_key[key] for key in keys),
                time.time(),
                int(self.expiry),
            )
            if full:
                logger.info("%s of %s channels over capacity in group %s", full, len(names), group)
