"""The one door through which run events and run status leave the host for clients (DESIGN §4).

Everything a browser, an SSE client or a `?wait=` request sees goes through this module, and only
after the rows it describes are committed: persist first, publish after commit. Nothing else in the
host calls `group_send`.

Two flavours of the same messages:
- `run_event_publish_on_commit` / `run_status_publish_on_commit` for synchronous code inside (or
  outside) a transaction: the message is sent by `transaction.on_commit`.
- `run_events_publish_committed` / `run_status_publish_committed` for coroutines on an event loop
  (the worker's orchestrator) whose writes have already committed; awaiting them keeps one run's
  messages in order without a thread hop.

Groups: `run.<run_id>` (one run) and `conv.<workspace_id>.<sha1(conversation_id)[:32]>` (every run of
a conversation; channel group names allow only a short ASCII alphabet, hence the digest).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

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
    }


def run_status_message(run: Run) -> dict[str, Any]:
    return {
        "type": RUN_STATUS,
        "run_id": str(run.run_id),
        "status": run.status,
        "status_reason": run.status_reason,
    }


async def _send_group(layer: Any, group: str, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        try:
            await layer.group_send(group, message)
        except Exception:
            # Publishing is best effort: the rows are committed and clients replay them on resume.
            logger.warning("publish to %s failed", group, exc_info=True)


async def _send(groups: list[str], messages: Iterable[dict[str, Any]]) -> None:
    """Send `messages` to every group: in order within a group, the groups concurrently."""
    layer = get_channel_layer()
    if layer is None:
        return
    batch = list(messages)
    if len(groups) == 1:
        await _send_group(layer, groups[0], batch)
    else:
        await asyncio.gather(*(_send_group(layer, group, batch) for group in groups))


def _send_sync(groups: list[str], messages: list[dict[str, Any]]) -> None:
    async_to_sync(_send)(groups, messages)


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


async def run_status_publish_committed(*, run: Run) -> None:
    """Publish a run status that is already committed (for code running on an event loop)."""
    await _send(run_groups(run), [run_status_message(run)])


def conversation_item_publish_on_commit(*, workspace_id: int, conversation_id: str, message: dict[str, Any]) -> None:
    """Publish a change to a conversation's transcript made outside a run's result stream (a platform
    action delivered on the web/API surface) to the conversation's group, after commit. The message is
    `{"type": "transcript.item", "action", "item"}`; the transcript API is its durable form."""
    groups = [conversation_group(workspace_id=workspace_id, conversation_id=conversation_id)]
    transaction.on_commit(lambda: _send_sync(groups, [message]))
