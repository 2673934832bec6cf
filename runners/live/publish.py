"""The one door through which run events and run status leave the host for clients (docs/architecture.md, "Runs").

Everything a browser, an SSE client or a `?wait=` request sees goes through this module, and only
after the rows it describes are committed: persist first, publish after commit. Nothing else in the
host calls `group_send`.

Two flavours of the same messages:
- `run_event_publish_on_commit` / `run_status_publish_on_commit` for synchronous code inside (or
  outside) a transaction: the message is sent by `transaction.on_commit`.
- `run_events_publish_committed` / `run_status_publish_committed` for coroutines on an event loop
  (the worker's orchestrator) whose writes have already committed. Each loop has one publication
  queue (`_Coalescer`), so what a loop publishes leaves in the order it was published, and one run's
  messages stay in order without a thread hop.

Groups: `run.<run_id>` (one run) and `conv.<workspace_id>.<sha1(conversation_id)[:32]>` (every run of
a conversation; channel group names allow only a short ASCII alphabet, hence the digest).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import weakref
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.db import transaction

from foundation.batches import Batch, Batches, settle
from foundation.compat.channels_redis import batching_supported, channel_messages, group_key
from runners.metrics import PUBLISH_LAG
from runners.models import Run, RunEvent

logger = logging.getLogger(__name__)

RUN_EVENT = "run.event"
RUN_STATUS = "run.status"


def run_group(run_id: object) -> str:
    return f"run.{run_id}"


def conversation_group(*, workspace_id: int, conversation_id: str) -> str:
    digest = hashlib.sha1(conversation_id.encode("utf-8"), usedforsecurity=False).hexdigest()[:32]
    return f"conv.{workspace_id}.{digest}"


def run_groups(run: Run) -> list[str]:
    groups = [run_group(run.run_id)]
    if run.conversation_id:
        groups.append(conversation_group(workspace_id=run.workspace_id, conversation_id=run.conversation_id))
    return groups


def run_event_message(run: Run, event: RunEvent) -> dict[str, Any]:
    return {
        "type": RUN_EVENT,
        "id": event.id,
        "run_id": str(run.run_id),
        "seq": event.seq,
        "event": {"type": event.type, "data": event.data},
        # For the subscribers' gap check (`runners.live.streaming`); not passed on to clients.
        "position": event.position,
    }


def run_status_message(run: Run) -> dict[str, Any]:
    return {
        "type": RUN_STATUS,
        "run_id": str(run.run_id),
        "status": run.status,
        "status_reason": run.status_reason,
        # Whether `message.delta` results will come (None until the run starts): false for a runner that
        # declares `streaming: false`, whose reply comes whole, so the chat shows it thinking until then.
        "streaming": ((run.authorization or {}).get("delivery") or {}).get("streaming"),
    }


async def _send_group(layer: Any, group: str, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        try:
            await layer.group_send(group, message)
        except Exception:
            # Publishing is best effort: the rows are committed and clients replay them on resume.
            logger.warning("publish to %s failed", group, exc_info=True)


# Adds each message to its channel key (as channels_redis' own group_send does: skip a full channel,
# drop expired messages, refresh the expiry); KEYS[i] gets ARGV[i] with score ARGV[n+i] if it holds fewer
# than ARGV[2n+i] messages. ARGV[3n+1] = expiry horizon, ARGV[3n+2] = key lifetime.
_GROUPS_SEND_LUA = """
local n = #KEYS
local horizon = ARGV[3 * n + 1]
local lifetime = ARGV[3 * n + 2]
local full = 0
for i = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, horizon)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[2 * n + i]) then
        redis.call('ZADD', KEYS[i], ARGV[n + i], ARGV[i])
        redis.call('EXPIRE', KEYS[i], lifetime)
    else
        full = full + 1
    end
end
return full
"""
_last_score = 0.0


def _next_score() -> float:
    """Strictly increasing scores within this process, so a batch keeps its order in a channel (messages
    with equal scores would pop in the order of their random prefixes)."""
    global _last_score
    _last_score = max(time.time(), _last_score + 2e-6)
    return _last_score


async def _send_batched(layer: RedisChannelLayer, sends: list[tuple[list[str], list[dict[str, Any]]]]) -> None:
    """`group_send` of every message of every send to each of its groups in two Redis round trips (one
    pipeline reading the groups' members, one script adding the messages), in order within each group."""
    connection = layer.connection(0)
    pipe = connection.pipeline(transaction=False)
    now = time.time()
    groups = list(dict.fromkeys(group for send_groups, _ in sends for group in send_groups))
    for group in groups:
        members_key = group_key(layer, group)
        pipe.zremrangebyscore(members_key, min=0, max=int(now) - layer.group_expiry)
        pipe.zrange(members_key, 0, -1)
    replies = await pipe.execute()
    members = {group: [m.decode("utf8") for m in replies[2 * i + 1]] for i, group in enumerate(groups)}
    keys: list[Any] = []
    payloads: list[Any] = []
    scores: list[float] = []
    capacities: list[int] = []
    for send_groups, messages in sends:
        for message in messages:
            for group in send_groups:
                channels = members[group]
                if not channels:
                    continue
                by_key, serialized, capacity = channel_messages(layer, channels, message)
                score = _next_score()
                for channel_keys in by_key.values():
                    for key in channel_keys:
                        keys.append(key)
                        payloads.append(serialized[key])
                        scores.append(score)
                        capacities.append(capacity[key])
    if not keys:
        return
    full = await connection.register_script(_GROUPS_SEND_LUA)(
        keys=keys, args=[*payloads, *scores, *capacities, int(time.time()) - int(layer.expiry), int(layer.expiry)]
    )
    if full:
        logger.info("%s message(s) not delivered to full channels of %s", full, ", ".join(groups))


class _Coalescer:
    """The publication queue of one event loop: publications leave in the order they were queued, so a
    run's messages keep their order whatever awaits them. On the host's Redis layer, what is queued while
    a batch is in flight goes out together in the next one (`foundation.batches`, `_send_batched`): a lone
    publication leaves at once, and under load (a worker's loop publishing for hundreds of runs) one batch
    replaces one pair of round trips per publication, which was a quarter of a busy worker's Python time.
    Other layers get the publications one `group_send` at a time."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.batched = batching_supported(layer)
        self.queue: Batches[tuple[list[str], list[dict[str, Any]]], None] = Batches(self._send)

    def send(self, groups: list[str], messages: list[dict[str, Any]]) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done = self.queue.submit((groups, messages))
        queued, lag = loop.time(), PUBLISH_LAG.labels(groups[0].partition(".")[0] if groups else "")
        done.add_done_callback(lambda _: lag.observe(loop.time() - queued))
        return done

    async def _send(self, batch: Batch[tuple[list[str], list[dict[str, Any]]], None]) -> None:
        sends = [send for send, _ in batch]
        if not self.batched:
            for groups, messages in sends:
                for group in groups:
                    await _send_group(self.layer, group, messages)
        else:
            try:
                await _send_batched(self.layer, sends)
            except Exception:
                # Publishing is best effort: the rows are committed and clients replay them on resume.
                failed = sorted({group for groups, _ in sends for group in groups})
                logger.warning("publish to %s failed", ", ".join(failed), exc_info=True)
        for _, done in batch:
            settle(done, None)


_coalescers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Coalescer] = weakref.WeakKeyDictionary()


def _send(groups: list[str], messages: Iterable[dict[str, Any]]) -> asyncio.Future[None]:
    """Queue `messages` for every group on the running loop's publication queue; the future is done once
    they are sent. Queued now, not when awaited: whatever this loop publishes later leaves after them."""
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    if layer is None:
        done = loop.create_future()
        done.set_result(None)
        return done
    coalescer = _coalescers.get(loop)
    if coalescer is None or coalescer.layer is not layer:
        coalescer = _coalescers[loop] = _Coalescer(layer)
    return coalescer.send(groups, list(messages))


async def _send_and_wait(groups: list[str], messages: list[dict[str, Any]]) -> None:
    await _send(groups, messages)


def _send_sync(groups: list[str], messages: list[dict[str, Any]]) -> None:
    async_to_sync(_send_and_wait)(groups, messages)


def run_event_publish_on_commit(*, run: Run, events: list[RunEvent]) -> None:
    """Publish persisted run events once the current transaction commits (at once outside one)."""
    if not events:
        return
    groups = run_groups(run)
    messages = [run_event_message(run, event) for event in events]
    transaction.on_commit(lambda: _send_sync(groups, messages))


def run_status_publish_on_commit(*, run: Run) -> None:
    """Publish the run's status (as it is on `run` now) once the current transaction commits."""
    groups = run_groups(run)
    messages = [run_status_message(run)]
    transaction.on_commit(lambda: _send_sync(groups, messages))


async def run_events_publish_committed(*, run: Run, events: list[RunEvent]) -> None:
    """Publish run events whose rows are already committed (for code running on an event loop)."""
    if events:
        await _send(run_groups(run), [run_event_message(run, event) for event in events])


def run_status_publish_committed(*, run: Run) -> asyncio.Future[None]:
    """Publish a run status that is already committed (for code running on an event loop). It is queued
    when this is called, with the status the run has then, ahead of anything the loop publishes later;
    await the result to know it was sent."""
    return _send(run_groups(run), [run_status_message(run)])


async def run_end_publish_committed(*, run: Run, events: list[RunEvent]) -> None:
    """Publish a run's last events and its final status, committed together, in one batch."""
    await _send(run_groups(run), [*(run_event_message(run, event) for event in events), run_status_message(run)])


def conversation_item_publish_on_commit(*, workspace_id: int, conversation_id: str, message: dict[str, Any]) -> None:
    """Publish a change to a conversation's transcript made outside a run's result stream (a platform
    action delivered on the web/API surface) to the conversation's group, after commit. The message is
    `{"type": "transcript.item", "action", "item"}`; the transcript API is its durable form."""
    groups = [conversation_group(workspace_id=workspace_id, conversation_id=conversation_id)]
    transaction.on_commit(lambda: _send_sync(groups, [message]))
