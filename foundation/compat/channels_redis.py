"""channels_redis' `RedisChannelLayer`: its Redis keys and its receive machinery, for the host's batched
layer (`runners.live.layers`) and batched publishing (`runners.live.publish`).

Relies on (channels_redis 4.3.0, `channels_redis/core.py`):
- key layout: a group is the sorted set `_group_key(group)` (`<prefix>:group:<group>`, bytes) of channel
  names scored by when they joined; a channel is the sorted set `prefix + channel` (for a process-local
  channel `x!y`, its non-local part `x!`) of serialized messages scored by when they were sent, with
  `_backup_channel_name(key)` (`key + "$inflight"`) holding what a reader popped and has not kept yet;
- `consistent_hash(name)` picks the index of the Redis host (`connection(index)`) of a group or channel;
- `_map_channel_keys_to_connection(channels, message)` gives, for a `group_send`, the channel keys per host
  index, each key's serialized message (with `__asgi_channel__`) and each key's capacity;
- `receive()` calls `receive_single(channel)` for a process-local channel under its receive lock, one at a
  time; `receive_single` holds `receive_clean_locks` (per channel key) from before it reads until its
  backup is cleared, and keeps the clean-up tasks in `receive_cleaners`, which `flush()`/`close_pools()`
  wait for.

Why: one Redis round trip for a process's waiting messages instead of four per message, one pipeline
for `group_add` and for several groups, two round trips for a batch of publications instead of two per
publication (bench/README.md, `stream_latency`; the figures are in `runners/live/layers.py` and
`runners/live/publish.py`). channels_redis has no batched receive or multi-group API.
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels_redis.core import RedisChannelLayer

TESTED_VERSION = "4.3.0"


def group_key(layer: RedisChannelLayer, group: str) -> bytes:
    """The Redis key of `group`'s member set."""
    key: bytes = layer._group_key(group)
    return key


def shard(layer: RedisChannelLayer, name: str) -> int:
    """The index of the Redis host (`layer.connection(index)`) that holds the group or channel `name`."""
    index: int = layer.consistent_hash(name)
    return index


def backup_key(layer: RedisChannelLayer, channel_key: str) -> str:
    """The key where a reader's popped messages of `channel_key` wait until it has kept them."""
    key: str = layer._backup_channel_name(channel_key)
    return key


def channel_messages(
    layer: RedisChannelLayer, channels: list[str], message: dict[str, Any]
) -> tuple[dict[int, list[str]], dict[str, bytes], dict[str, int]]:
    """What `group_send` of `message` to `channels` writes: the channel keys per host index, each key's
    serialized message and each key's capacity."""
    by_index, serialized, capacity = layer._map_channel_keys_to_connection(channels, message)
    return by_index, serialized, capacity


def batching_supported(layer: Any) -> bool:
    """Whether `layer` is a single-host channels_redis layer with what batched publishing uses."""
    return (
        isinstance(layer, RedisChannelLayer)
        and layer.ring_size == 1
        and hasattr(layer, "_map_channel_keys_to_connection")
        and hasattr(layer, "_group_key")
    )


async def receive_clean_lock(layer: RedisChannelLayer, channel_key: str) -> None:
    """Take the lock channels_redis holds on `channel_key` while a read's backup is not yet cleared."""
    await layer.receive_clean_locks.acquire(channel_key)


def receive_clean_unlock(layer: RedisChannelLayer, channel_key: str) -> None:
    """Release `receive_clean_lock` (a read that left nothing in the backup, or failed)."""
    layer.receive_clean_locks.release(channel_key)


def receive_clean_later(layer: RedisChannelLayer, channel_key: str, cleaner: asyncio.Future[Any]) -> None:
    """Hand the task clearing `channel_key`'s backup to the layer, as its own reads do: `flush()` and
    `close_pools()` wait for it, and the lock is released when it is done."""
    layer.receive_cleaners.append(cleaner)

    def _cleaned(task: asyncio.Future[Any]) -> None:
        layer.receive_cleaners.remove(task)
        layer.receive_clean_locks.release(channel_key)

    cleaner.add_done_callback(_cleaned)
