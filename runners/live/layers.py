"""The host's channel layer: channels_redis' `RedisChannelLayer`, receiving a process's messages in batches.

channels_redis keeps every message for the channels of one process (the chat consumers of a daphne
process) in one sorted set and reads it one message at a time, four Redis round trips each (restore the
backup, pop, back up, clear the backup). When the process is also busy with synchronous work (a burst of
chat submissions on its sync thread), every round trip waits for the GIL, and live delivery falls hundreds
of milliseconds behind. Here one round trip takes up to `receive_batch` waiting messages, with the same
backup guarantee: the script that pops them also copies them to the backup set, which is cleared once they
are in this process's memory and restored to the channel if a reader was cancelled in between. A reader
that found nothing and blocked (BZPOPMIN) has its message in memory as soon as the pop returns, so it
sends nothing more: channels_redis backs that message up and clears the backup again, two round trips on
the way of every live event to an idle socket.

`group_add` sends its two commands in one pipeline instead of one after the other; `groups_add` and
`groups_discard` subscribe and unsubscribe a channel to several groups (a `?wait=` on the runs of one
event) in one pipeline per Redis shard.

What this relies on of channels_redis beyond its public methods goes through `foundation.compat.channels_redis`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from channels_redis.core import RedisChannelLayer

from foundation.compat.channels_redis import (
    backup_key,
    group_key,
    receive_clean_later,
    receive_clean_lock,
    receive_clean_unlock,
    shard,
)

# Restore what a cancelled reader left in the backup (in order), then pop up to ARGV[1] messages and back
# them up. KEYS[1] = channel, KEYS[2] = backup. Returns [member, score, member, score, ...].
_POP_BATCH_LUA = """
local backed_up = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = #backed_up, 1, -2 do
    redis.call('ZADD', KEYS[1], backed_up[i], backed_up[i - 1])
end
redis.call('DEL', KEYS[2])
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
for i = 1, #popped, 2 do
    redis.call('ZADD', KEYS[2], popped[i + 1], popped[i])
end
return popped
"""


class BatchedRedisChannelLayer(RedisChannelLayer):
    """`RedisChannelLayer` whose process-local receive takes every waiting message (up to `receive_batch`)
    in one round trip and hands them out one by one, and whose `group_add` is one round trip."""

    receive_batch = 200

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prefetched: dict[str, deque[Any]] = {}

    async def group_add(self, group: str, channel: str) -> None:
        """channels_redis' `group_add` (add the member, refresh the group's expiry) as one pipeline: every
        chat socket, SSE stream and `?wait=` request subscribes before it reads, so this is on their path."""
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        key = group_key(self, group)
        pipe = self.connection(shard(self, group)).pipeline(transaction=False)
        pipe.zadd(key, {channel: time.time()})
        pipe.expire(key, self.group_expiry)
        await pipe.execute()

    async def groups_add(self, groups: list[str], channel: str) -> None:
        """`group_add` of `channel` to every group, one round trip per shard."""
        self.require_valid_channel_name(channel)
        now = time.time()
        for index, keys in self._group_keys_by_shard(groups).items():
            pipe = self.connection(index).pipeline(transaction=False)
            for key in keys:
                pipe.zadd(key, {channel: now})
                pipe.expire(key, self.group_expiry)
            await pipe.execute()

    async def groups_discard(self, groups: list[str], channel: str) -> None:
        """`group_discard` of `channel` from every group, one round trip per shard."""
        self.require_valid_channel_name(channel)
        for index, keys in self._group_keys_by_shard(groups).items():
            pipe = self.connection(index).pipeline(transaction=False)
            for key in keys:
                pipe.zrem(key, channel)
            await pipe.execute()

    def _group_keys_by_shard(self, groups: list[str]) -> dict[int, list[bytes]]:
        shards: dict[int, list[bytes]] = {}
        for group in groups:
            self.require_valid_group_name(group)
            shards.setdefault(shard(self, group), []).append(group_key(self, group))
        return shards

    async def receive_single(self, channel: str) -> tuple[str, dict[str, Any]]:
        if not channel.endswith("!"):
            return await super().receive_single(channel)
        # Only called under channels_redis' receive lock, so one fetch runs at a time per channel.
        waiting = self._prefetched.setdefault(channel, deque())
        if not waiting:
            await self._fetch(channel, waiting)
        message = self.deserialize(waiting.popleft())
        if "__asgi_channel__" in message:
            channel = message.pop("__asgi_channel__")
        return channel, message

    async def _fetch(self, channel: str, into: deque[Any]) -> None:
        index = shard(self, channel)
        key = self.prefix + channel
        backup = backup_key(self, key)
        connection = self.connection(index)
        await receive_clean_lock(self, key)
        try:
            popped = await connection.eval(_POP_BATCH_LUA, 2, key, backup, self.receive_batch)
            members = list(popped[::2])
            backed_up = bool(members)
            while not members:
                # Nothing waiting: block for the next message. Nothing awaits between its arrival and
                # `into.extend` below, so a backup copy could not be needed (a reader cancelled while the
                # reply is on its way loses the message either way: the server has popped it).
                result = await connection.bzpopmin(key, timeout=self.brpop_timeout)
                if result is not None:
                    members = [result[1]]
        except BaseException:
            receive_clean_unlock(self, key)
            raise
        # From here on nothing awaits until the messages are in memory; then the backup can go.
        into.extend(members)
        if not backed_up:
            # The script emptied the backup and put nothing in it: there is nothing to clean.
            receive_clean_unlock(self, key)
            return
        receive_clean_later(self, key, asyncio.ensure_future(connection.delete(backup)))
