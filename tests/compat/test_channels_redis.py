"""foundation.compat.channels_redis against the installed channels_redis: its keys and receive machinery are
where and what the host's batched layer and batched publishing take them to be."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from channels_redis.core import RedisChannelLayer
from django.conf import settings

from foundation.compat import channels_redis as compat
from tests.compat.pins import assert_pinned


def test_channels_redis_is_the_version_the_compat_module_was_checked_against() -> None:
    assert_pinned("channels-redis", checked=compat.TESTED_VERSION, module="foundation/compat/channels_redis.py")


def fresh_layer() -> RedisChannelLayer:
    config: Any = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    return RedisChannelLayer(hosts=config["hosts"], prefix=f"compat-{uuid.uuid4().hex[:8]}")


def test_group_add_records_members_under_the_group_key() -> None:
    async def scenario() -> list[bytes]:
        layer = fresh_layer()
        try:
            await layer.group_add("conv.1.abc", "specific.x!y")
            connection = layer.connection(compat.shard(layer, "conv.1.abc"))
            members: list[bytes] = await connection.zrange(compat.group_key(layer, "conv.1.abc"), 0, -1)
            await layer.flush()
            return members
        finally:
            await layer.close_pools()

    assert asyncio.run(scenario()) == [b"specific.x!y"]


def test_messages_written_as_group_send_would_are_received_by_the_channel() -> None:
    async def scenario() -> tuple[dict[int, list[str]], dict[str, Any], dict[str, Any]]:
        layer = fresh_layer()
        try:
            local = await layer.new_channel()
            by_index, serialized, capacity = compat.channel_messages(layer, [local], {"type": "run.event", "n": 1})
            for index, keys in by_index.items():
                for key in keys:
                    await layer.connection(index).zadd(key, {serialized[key]: 1.0})
            received = await asyncio.wait_for(layer.receive(local), 5)
            await layer.flush()
            return by_index, received, capacity
        finally:
            await layer.close_pools()

    by_index, received, capacity = asyncio.run(scenario())
    assert list(by_index) == [0]
    assert received == {"type": "run.event", "n": 1}
    assert list(capacity.values()) == [100]  # channels_redis' default capacity


def test_what_waits_in_the_backup_key_is_received_before_the_channel() -> None:
    async def scenario() -> dict[str, Any]:
        layer = fresh_layer()
        try:
            key = layer.prefix + "plain"
            connection = layer.connection(compat.shard(layer, "plain"))
            await connection.zadd(compat.backup_key(layer, key), {layer.serialize({"type": "from.backup"}): 1.0})
            received: dict[str, Any] = await asyncio.wait_for(layer.receive("plain"), 5)
            await layer.flush()
            return received
        finally:
            await layer.close_pools()

    assert asyncio.run(scenario()) == {"type": "from.backup"}


def test_a_process_local_receive_goes_through_receive_single_and_the_clean_lock() -> None:
    calls: list[str] = []

    class Spying(RedisChannelLayer):
        async def receive_single(self, channel: str) -> Any:
            calls.append(channel)
            return await super().receive_single(channel)

    async def scenario() -> bool:
        config: Any = settings.CHANNEL_LAYERS["default"]["CONFIG"]
        layer = Spying(hosts=config["hosts"], prefix=f"compat-{uuid.uuid4().hex[:8]}")
        try:
            local = await layer.new_channel()
            await layer.send(local, {"type": "hello"})
            await asyncio.wait_for(layer.receive(local), 5)
            # The clean lock is free again once the layer's clean-up is done; a cleaner handed over the same
            # way is awaited by flush() and frees it too.
            key = layer.prefix + local.split("!")[0] + "!"
            await asyncio.wait_for(compat.receive_clean_lock(layer, key), 5)
            compat.receive_clean_unlock(layer, key)
            await compat.receive_clean_lock(layer, key)
            cleaner = asyncio.ensure_future(asyncio.sleep(0.01))
            compat.receive_clean_later(layer, key, cleaner)
            assert cleaner in layer.receive_cleaners
            await layer.flush()
            await asyncio.wait_for(compat.receive_clean_lock(layer, key), 5)
            compat.receive_clean_unlock(layer, key)
            return cleaner not in layer.receive_cleaners
        finally:
            await layer.close_pools()

    assert asyncio.run(scenario())
    assert len(calls) == 1
    assert calls[0].endswith("!")


def test_a_single_redis_layer_supports_batching() -> None:
    assert compat.batching_supported(fresh_layer())
    assert not compat.batching_supported(object())
