"""The delivery layer of platform actions (`message.send`, `message.edit`, `reaction.add`): one
deliverer per surface — the surface of the bot the run's event came through, else the event's source.

Implemented: `webui` and `api`, whose "platform" is the host's own transcript — `message.send` appends
an assistant TranscriptItem to the run's conversation, `message.edit` changes an assistant item of that
conversation, `reaction.add` acknowledges a reaction on an item; each is published to the conversation's
WebSocket group through `runners.live.publish`. Every other surface goes through the delivery port
(`DeliveryPort`, one implementation in a `foundation.ports.Port` slot) that `platforms` installs at
start-up (`delivery_port_install`, from `PlatformsConfig.ready`): it declares what a platform
supports (`surface_delivery`, which the context builder turns into `ctx.delivery`), carries out platform
actions there, and takes a platform-originated run's committed results (`run_results_observe`, called
by the orchestrator after it publishes them) to stream them to the chat. Without the port, or for a
platform without an adapter, actions raise `DeliveryUnsupportedError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from foundation.ports import Port
from runners.live.publish import conversation_item_publish_on_commit
from runners.models import Run, RunEvent
from transcripts.models import TranscriptItem

logger = logging.getLogger(__name__)

HOST_SURFACES = frozenset({"webui", "api"})
MESSAGE_MAX_CHARS = 64 * 1024


class DeliveryError(Exception):
    """The action cannot be delivered; `code` is an `ErrorCode` value for the proxy answer."""

    code = "invalid_argument"


class DeliveryUnsupportedError(DeliveryError):
    code = "runtime_error"


class DeliveryTargetNotFoundError(DeliveryError):
    code = "not_found"


@dataclass(frozen=True)
class SurfaceDelivery:
    """What a surface can do with a run's results: the `ctx.delivery` flags and the platform actions it
    carries out. `max_message_size` is the surface's own limit on one message (None: no limit)."""

    supports_streaming: bool = False
    supports_edit: bool = False
    supports_reaction: bool = False
    max_message_size: int | None = None
    actions: tuple[str, ...] = ()
    capabilities: dict[str, Any] = field(default_factory=dict)


# The web chat and the API carry out all three actions below (`_host_deliver`), so they say they can edit and
# react. Their deltas are shown as they come (no message is edited per chunk), so a runner that picks its
# delta cadence from `supports_edit` is told by `stream_mode` to send fragments.
HOST_SURFACE_DELIVERY = SurfaceDelivery(
    supports_streaming=True,
    supports_edit=True,
    supports_reaction=True,
    actions=("message.send", "message.edit", "reaction.add"),
    capabilities={"stream_mode": "fragments"},
)
UNSUPPORTED_SURFACE = SurfaceDelivery()


class DeliveryPort(Protocol):
    """What `platforms` provides to `runners` (installed once at start-up)."""

    def surface(self, surface: str, credentials: Mapping[str, Any] | None = None) -> SurfaceDelivery | None:
        """The surface's delivery (for a bot with these credentials, when given), or None when no adapter
        serves it."""

    def action_deliver(
        self, *, run: Run, action: str, target: dict[str, Any], payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Carry out a platform action on the run's platform (sync; raises `DeliveryError`)."""

    def results_observe(self, *, run: Run, events: Sequence[RunEvent], ended: bool) -> None:
        """Take committed results of a run that has a bot (on the worker's event loop; must not block)."""

    async def wait_idle(self) -> None:
        """Return once every reply being delivered has been delivered (or has failed)."""


delivery_port: Port[DeliveryPort] = Port("delivery")


def delivery_port_install(port: DeliveryPort | None) -> None:
    delivery_port.install(port)


def surface_delivery(surface: str, *, credentials: Mapping[str, Any] | None = None) -> SurfaceDelivery:
    if surface in HOST_SURFACES:
        return HOST_SURFACE_DELIVERY
    port = delivery_port.installed
    found = port.surface(surface, credentials) if port is not None else None
    return found if found is not None else UNSUPPORTED_SURFACE


def run_results_observe(*, run: Run, events: Sequence[RunEvent], ended: bool) -> None:
    """Hand a run's committed results to the platform delivery; only runs that came through a bot can be
    platform runs, so every other run costs one attribute check."""
    port = delivery_port.installed
    if port is None or run.bot_id is None:
        return
    port.results_observe(run=run, events=events, ended=ended)


async def deliveries_drain(*, timeout: float) -> None:
    """Let replies still being written to chat platforms finish (worker shutdown), for at most `timeout`."""
    port = delivery_port.installed
    if port is None:
        return
    try:
        async with asyncio.timeout(timeout):
            await port.wait_idle()
    except TimeoutError:
        logger.warning("worker stopping: platform deliveries still running after %.0fs are abandoned", timeout)


def run_surface(run: Run) -> str:
    return run.bot.platform if run.bot is not None else run.event.source


def _item_out(item: TranscriptItem) -> dict[str, Any]:
    return {
        "message_id": str(item.pk),
        "role": item.role,
        "content": item.content,
        "contents": item.contents,
        "runner_id": item.runner_id,
        "created_at": item.created_at.isoformat() if item.created_at else None,
    }


def _text(payload: dict[str, Any]) -> str:
    text = payload.get("text")
    if not isinstance(text, str) or not text:
        raise DeliveryError("payload.text must be a non-empty string")
    if len(text) > MESSAGE_MAX_CHARS:
        raise DeliveryError(f"payload.text is longer than {MESSAGE_MAX_CHARS} characters")
    return text


def _target_item(run: Run, target: dict[str, Any], *, assistant_only: bool) -> TranscriptItem:
    message_id = str(target.get("message_id") or "")
    if not message_id.isdigit():
        raise DeliveryTargetNotFoundError("target.message_id names no message of this conversation")
    items = TranscriptItem.objects.filter(
        pk=int(message_id), workspace_id=run.workspace_id, conversation_id=run.conversation_id
    )
    if assistant_only:
        items = items.filter(role=TranscriptItem.Role.ASSISTANT)
    item = items.first()
    if item is None:
        raise DeliveryTargetNotFoundError("target.message_id names no message of this conversation")
    return item


def _host_deliver(run: Run, action: str, target: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    if not run.conversation_id:
        raise DeliveryTargetNotFoundError("the run has no conversation to deliver to")
    conversation = target.get("conversation_id")
    if conversation is not None and conversation != run.conversation_id:
        raise DeliveryTargetNotFoundError("target.conversation_id is not this run's conversation")
    if action == "message.send":
        item = TranscriptItem.objects.create(
            workspace_id=run.workspace_id,
            conversation_id=run.conversation_id,
            thread_id=run.thread_id,
            role=TranscriptItem.Role.ASSISTANT,
            content=_text(payload),
            event_id=run.event_id,
            # Not `run_id`: that names the run's one reply (a unique constraint); this is an extra message.
            runner_id=run.runner_id,
        )
        result = {"message_id": str(item.pk)}
        message = {"type": "transcript.item", "action": action, "run_id": str(run.run_id), "item": _item_out(item)}
    elif action == "message.edit":
        item = _target_item(run, target, assistant_only=True)
        item.content = _text(payload)
        item.save(update_fields=["content"])
        result = {"message_id": str(item.pk)}
        message = {"type": "transcript.item", "action": action, "run_id": str(run.run_id), "item": _item_out(item)}
    elif action == "reaction.add":
        item = _target_item(run, target, assistant_only=False)
        reaction = payload.get("reaction")
        if not isinstance(reaction, str) or not reaction or len(reaction) > 64:
            raise DeliveryError("payload.reaction must be a short non-empty string")
        result = {"message_id": str(item.pk), "reaction": reaction}
        message = {
            "type": "transcript.item",
            "action": action,
            "run_id": str(run.run_id),
            "item": {"message_id": str(item.pk)},
            "reaction": reaction,
        }
    else:
        raise DeliveryUnsupportedError(f"platform action {action!r} is not supported on the web/API surface")
    conversation_item_publish_on_commit(
        workspace_id=run.workspace_id, conversation_id=run.conversation_id, message=message
    )
    return result


def platform_action_deliver(
    *, run: Run, action: str, target: dict[str, Any], payload: dict[str, Any]
) -> dict[str, Any]:
    """Carry out `action` on the run's surface; returns the action's result (e.g. the message id)."""
    surface = run_surface(run)
    if surface in HOST_SURFACES:
        return _host_deliver(run, action, target, payload)
    port = delivery_port.installed
    if port is not None and port.surface(surface) is not None:
        return port.action_deliver(run=run, action=action, target=target, payload=payload)
    raise DeliveryUnsupportedError(f"platform actions on {surface!r} are unsupported until its delivery adapter exists")
