"""Live run events reach chat sockets promptly: not queued behind the web process's synchronous database
work, read from the channel layer in batches and published in batches, without losing, repeating or
reordering a message."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings

from runners.live import publish as publish_module
from runners.live.layers import BatchedRedisChannelLayer
from runners.live.publish import run_group, run_status_publish_committed
from runners.models import Run
from tests.streaming.conftest import ORIGIN, collect, ids, make_run, open_socket, persist, publish, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def fresh_layer() -> BatchedRedisChannelLayer:
    config: Any = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    return BatchedRedisChannelLayer(hosts=config["hosts"], prefix=f"test-{uuid.uuid4().hex[:8]}")


class RecordedCommands(list[str]):
    """The Redis commands the layer sends for one channel from now on, in order; `blocked` is set when the
    reader sends its blocking pop (the reader's task yields only once the command is on its way)."""

    def __init__(self, layer: BatchedRedisChannelLayer, channel: str, monkeypatch: Any) -> None:
        super().__init__()
        self.blocked = asyncio.Event()
        connection = layer.connection(layer.consistent_hash(layer.non_local_name(channel)))
        real_execute = connection.execute_command

        async def recording(*args: Any, **kwargs: Any) -> Any:
            self.append(str(args[0]).upper())
            if self[-1] == "BZPOPMIN":
                self.blocked.set()
            return await real_execute(*args, **kwargs)

        monkeypatch.setattr(connection, "execute_command", recording)

    async def until_blocked(self, timeout: float = 5.0) -> None:
        await asyncio.wait_for(self.blocked.wait(), timeout)


async def test_live_events_reach_the_socket_while_the_sync_thread_is_busy(member):
    # Given a subscribed socket and two persisted events
    user, workspace = member
    run = await database_sync_to_async(make_run)(workspace)
    rows = await database_sync_to_async(persist)(run, "message.delta", "tool.call.started")
    comm, connected, _ = await open_socket(ORIGIN, await database_sync_to_async(session_cookie)(user))
    assert connected
    await comm.send_json_to({"type": "subscribe", "conversation_id": "conv-1", "after_id": 0})
    assert ids(await collect(comm, 3)) == [(str(run.run_id), row.seq) for row in rows]
    # and the process's one thread-sensitive sync thread busy (as with a burst of chat submissions)
    release = threading.Event()
    busy = asyncio.ensure_future(sync_to_async(release.wait, thread_sensitive=True)())
    try:
        # When the events are published
        await publish(run, await database_sync_to_async(persist)(run, "message.delta", "run.completed"))

        # Then they are delivered before the sync thread is free again
        live = await collect(comm, 2)
        assert not busy.done()
    finally:
        release.set()
        await busy
    assert ids(live) == [(str(run.run_id), 3), (str(run.run_id), 4)]
    await comm.disconnect()


async def test_messages_for_many_local_channels_arrive_each_in_its_order():
    # Given three process-local channels of the batched layer with messages waiting for all of them
    layer = fresh_layer()
    channels = [await layer.new_channel() for _ in range(3)]
    try:
        for n in range(30):
            await layer.send(channels[n % 3], {"type": "test.message", "n": n})

        # When each channel is read
        received = [[(await layer.receive(channel))["n"] for _ in range(10)] for channel in channels]

        # Then every message arrived once, in the order it was sent to its channel
        assert received == [list(range(i, 30, 3)) for i in range(3)]
    finally:
        await layer.flush()


async def test_a_reader_cancelled_while_waiting_loses_nothing(monkeypatch):
    # Given a reader waiting on an empty channel, cancelled
    layer = fresh_layer()
    channel = await layer.new_channel()
    commands = RecordedCommands(layer, channel, monkeypatch)
    try:
        waiting = asyncio.ensure_future(layer.receive(channel))
        await commands.until_blocked()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

        # When a message is sent afterwards
        await layer.send(channel, {"type": "test.message", "n": 1})

        # Then the next reader gets it
        assert (await asyncio.wait_for(layer.receive(channel), 5))["n"] == 1
    finally:
        await layer.flush()


async def test_a_waiting_reader_gets_its_message_without_further_round_trips(monkeypatch):
    # Given a reader waiting on an empty process-local channel, its Redis commands recorded
    layer = fresh_layer()
    channel = await layer.new_channel()
    commands = RecordedCommands(layer, channel, monkeypatch)
    config: Any = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    sender = BatchedRedisChannelLayer(hosts=config["hosts"], prefix=layer.prefix)
    try:
        waiting = asyncio.ensure_future(layer.receive(channel))
        await commands.until_blocked()
        assert commands == ["EVAL", "BZPOPMIN"]

        # When a message arrives
        await sender.send(channel, {"type": "test.message", "n": 1})

        # Then the reader has it with nothing sent to Redis after the blocking pop: every command after
        # it would delay each live event on its way to a socket
        assert (await asyncio.wait_for(waiting, 5))["n"] == 1
        await asyncio.gather(*layer.receive_cleaners)
        assert commands[2:] == []
    finally:
        await sender.flush()
        await layer.flush()


async def test_messages_a_cancelled_reader_left_in_the_backup_are_delivered_first():
    # Given a message popped by a reader that was cancelled before it had it (it sits in the backup set)
    layer = fresh_layer()
    channel = await layer.new_channel()
    key = layer.prefix + layer.non_local_name(channel)
    try:
        await layer.send(channel, {"type": "test.message", "n": 1})
        connection = layer.connection(layer.consistent_hash(layer.non_local_name(channel)))
        [(member, score)] = await connection.zpopmin(key)
        await connection.zadd(layer._backup_channel_name(key), {member: score})
        await layer.send(channel, {"type": "test.message", "n": 2})

        # When the channel is read
        first = await asyncio.wait_for(layer.receive(channel), 5)
        second = await asyncio.wait_for(layer.receive(channel), 5)

        # Then the backed-up message comes back, before the later one, and only once
        assert [first["n"], second["n"]] == [1, 2]
        await asyncio.gather(*layer.receive_cleaners)
        assert await connection.zcard(layer._backup_channel_name(key)) == 0
    finally:
        await layer.flush()


async def test_concurrent_publications_share_batches_and_keep_each_runs_order(monkeypatch):
    # Given a listener on the groups of 20 runs, and the batches the publisher sends recorded (on a layer
    # of this test's own: a process-local receive leaves loop-bound state behind in the layer)
    layer = fresh_layer()
    monkeypatch.setattr(publish_module, "get_channel_layer", lambda: layer)
    channel = await layer.new_channel()
    runs = [Run(run_id=uuid.uuid4(), workspace_id=1, conversation_id="") for _ in range(20)]
    for run in runs:
        await layer.group_add(run_group(run.run_id), channel)
    batch_sizes: list[int] = []
    real_send = publish_module._send_batched

    async def recording(layer_, sends):
        batch_sizes.append(len(sends))
        await real_send(layer_, sends)

    monkeypatch.setattr(publish_module, "_send_batched", recording)
    statuses = ["queued", "running", "completed"]

    # When every run publishes its three statuses at once, as a busy worker's runs do
    async def lifecycle(run: Run) -> None:
        for status in statuses:
            run.status = status
            await run_status_publish_committed(run=run)

    await asyncio.gather(*(lifecycle(run) for run in runs))

    # Then every message arrives, each run's in the order it was published, and they left in shared batches
    received = [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(len(runs) * len(statuses))]
    by_run: dict[str, list[str]] = {}
    for message in received:
        by_run.setdefault(message["run_id"], []).append(message["status"])
    assert by_run == {str(run.run_id): statuses for run in runs}
    assert sum(batch_sizes) == len(runs) * len(statuses)
    assert max(batch_sizes) > 1
    await layer.flush()


async def test_a_channel_added_to_a_group_gets_its_messages_and_the_group_expires():
    layer = fresh_layer()
    channel = await layer.new_channel()

    await layer.group_add("run.added", channel)
    await layer.group_send("run.added", {"type": "run.status", "status": "running"})

    assert (await asyncio.wait_for(layer.receive(channel), 5))["status"] == "running"
    ttl = await layer.connection(0).ttl(layer._group_key("run.added"))
    assert 0 < ttl <= layer.group_expiry
    with pytest.raises(TypeError):
        await layer.group_add("not a valid group name", channel)
    await layer.flush()
