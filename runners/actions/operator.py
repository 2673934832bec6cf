"""An operator's reply in a conversation they hold (README "Human takeover"): it goes out the way the
conversation's runs answer — the web chat and API conversations through the host's transcript and live
group, a chat platform's through the delivery port's `message.send` — and is recorded in the transcript
as an assistant turn whose actor is the operator, so the user sees one conversation and a later run's
history reads it as the bot's side.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from runners.actions.delivery import (
    HOST_SURFACES,
    MESSAGE_MAX_CHARS,
    DeliveryError,
    delivery_port,
)
from runners.live.publish import conversation_item_publish_on_commit
from runners.models import Run
from runners.takeover.models import ConversationHold
from runners.takeover.services import (
    OPERATOR_ACTOR_TYPE,
    ConversationNotHeldError,
    conversation_hold_open,
    conversation_last_event,
)
from transcripts.models import TranscriptItem

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorReply:
    """The recorded reply and, on a chat platform, the platform's answer (`message_id`, `chat_id`)."""

    item: TranscriptItem
    platform_message: dict[str, Any] = field(default_factory=dict)


def operator_reply(*, workspace_id: int, conversation_id: str, operator: str, text: str) -> OperatorReply:
    """Send `text` as `operator` into a conversation held by a person, and record it. Raises
    `ConversationNotHeldError` when nobody holds it (the bindings answer it then), `DeliveryError` when the
    platform refused the message (nothing is recorded)."""
    if not text.strip():
        raise DeliveryError("text must not be empty")
    if len(text) > MESSAGE_MAX_CHARS:
        raise DeliveryError(f"text is longer than {MESSAGE_MAX_CHARS} characters")
    hold = conversation_hold_open(workspace_id=workspace_id, conversation_id=conversation_id)
    if hold is None or hold.status != ConversationHold.Status.HELD:
        raise ConversationNotHeldError(conversation_id)
    last = conversation_last_event(workspace_id=workspace_id, conversation_id=conversation_id)
    if last is None:
        raise ConversationNotHeldError(conversation_id)
    bot = last.bot
    surface = bot.platform if bot is not None else last.source
    sent: dict[str, Any] = {}
    if surface not in HOST_SURFACES:
        port = delivery_port.installed
        if port is None or port.surface(surface) is None:
            raise DeliveryError(f"replies on {surface!r} cannot be sent: no delivery adapter serves it")
        # The platform's `message.send` reads only a run's bot and event (the chat to write to); the
        # conversation's newest event stands in for a run, since no run answers a held conversation.
        stand_in = Run(workspace_id=workspace_id, bot=bot, event=last, conversation_id=conversation_id)
        sent = port.action_deliver(run=stand_in, action="message.send", target={}, payload={"text": text})
    with transaction.atomic():
        item = TranscriptItem.objects.create(
            workspace_id=workspace_id,
            conversation_id=conversation_id,
            thread_id=last.thread_id,
            role=TranscriptItem.Role.ASSISTANT,
            content=text,
            actor={"actor_type": OPERATOR_ACTOR_TYPE, "actor_id": operator, "actor_name": operator},
        )
        conversation_item_publish_on_commit(
            workspace_id=workspace_id,
            conversation_id=conversation_id,
            message={"type": "transcript.item", "action": "message.send", "item": operator_item_out(item)},
        )
    logger.info("operator %s replied in conversation %s (%s)", operator, conversation_id, surface)
    return OperatorReply(item=item, platform_message=sent)


def operator_item_out(item: TranscriptItem) -> dict[str, Any]:
    actor = item.actor if isinstance(item.actor, dict) else {}
    return {
        "message_id": str(item.pk),
        "role": item.role,
        "content": item.content,
        "contents": item.contents,
        "actor": actor,
        "operator": actor.get("actor_id"),
        "created_at": item.created_at.isoformat() if item.created_at else None,
    }
