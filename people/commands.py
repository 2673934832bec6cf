"""`/link`, the command the host answers itself before any binding sees the message (README "People").

`/link` alone asks for a one-time code; `/link CODE` on another channel links that channel's identity to
the person who asked. The answer goes back on the channel the command came from — in the web chat and the
API as an assistant item of the conversation, on a chat platform through the platform's `message.send` —
and no run starts.
"""

from __future__ import annotations

import logging
import re
from functools import partial
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from bindings.models import Bot
from people.services import ActorRef, LinkOutcome, LinkRateLimitedError, link_code_issue, link_code_redeem
from runners.actions.delivery import HOST_SURFACES, DeliveryError, delivery_port
from runners.live.publish import conversation_item_publish_on_commit
from runners.models import Run
from transcripts.models import EventLog, TranscriptItem

logger = logging.getLogger(__name__)

LINK_COMMAND = "/link"
HOST_ACTOR = {"actor_type": "host", "actor_id": "people", "actor_name": "LangBot"}
_LINK = re.compile(r"^/link(?:@\S+)?(?:\s+(?P<code>[A-Za-z0-9-]{4,20}))?\s*$", re.IGNORECASE)


def link_command_of(text: str | None) -> str | None:
    """The code of a `/link CODE` message, "" for `/link` alone, None for any other message. A Telegram
    style `/link@botname` counts too."""
    if not text:
        return None
    match = _LINK.match(text.strip())
    if match is None:
        return None
    return match.group("code") or ""


def link_command_answer(*, event: EventLog, bot: Bot | None, code: str) -> str:
    """Carry out the command of `event` and send the answer; returns the answer's text. Call inside the
    transaction that recorded the event: the answer is delivered once it commits."""
    actor = event.actor if isinstance(event.actor, dict) else {}
    channel = bot.platform if bot is not None else event.source
    if not actor.get("actor_id"):
        text = _("This channel does not say who you are, so it cannot be linked.")
        _reply(event=event, bot=bot, text=text)
        return text
    ref = ActorRef(
        channel=channel,
        actor_type=str(actor.get("actor_type") or "user"),
        actor_id=str(actor["actor_id"]),
        actor_name=str(actor.get("actor_name") or ""),
    )
    if not code:
        try:
            issued, row = link_code_issue(workspace_id=event.workspace_id, actor=ref)
        except LinkRateLimitedError:
            text = _("You asked for too many link codes; try again in an hour.")
        else:
            minutes = max(1, round((row.expires_at - row.created_at).total_seconds() / 60))
            text = _(
                "Your link code is %(code)s. Send “/link %(code)s” from your other account within %(minutes)d "
                "minutes to be recognised there as the same person. Share it with nobody."
            ) % {"code": issued, "minutes": minutes}
    else:
        outcome, _person = link_code_redeem(workspace_id=event.workspace_id, actor=ref, code=code)
        text = {
            LinkOutcome.LINKED: _("Linked: this account and the one that asked for the code are now one person."),
            LinkOutcome.ALREADY: _("This account is already linked to that person."),
            LinkOutcome.INVALID: _("That link code is wrong, used or expired. Ask for a new one with /link."),
            LinkOutcome.RATE_LIMITED: _("Too many wrong link codes; wait a quarter of an hour and try again."),
        }[outcome]
    _reply(event=event, bot=bot, text=text)
    return text


def _reply(*, event: EventLog, bot: Bot | None, text: str) -> None:
    surface = bot.platform if bot is not None else event.source
    item = TranscriptItem.objects.create(
        workspace_id=event.workspace_id,
        conversation_id=event.conversation_id,
        thread_id=event.thread_id,
        role=TranscriptItem.Role.ASSISTANT,
        content=text,
        actor=HOST_ACTOR,
    )
    if surface in HOST_SURFACES:
        conversation_item_publish_on_commit(
            workspace_id=event.workspace_id,
            conversation_id=event.conversation_id,
            message={"type": "transcript.item", "action": "message.send", "item": _item_out(item)},
        )
    else:
        transaction.on_commit(partial(_platform_send, event=event, bot=bot, text=text))


def _item_out(item: TranscriptItem) -> dict[str, Any]:
    return {
        "message_id": str(item.pk),
        "role": item.role,
        "content": item.content,
        "contents": item.contents,
        "actor": item.actor,
        "created_at": item.created_at.isoformat() if item.created_at else None,
    }


def _platform_send(*, event: EventLog, bot: Bot | None, text: str) -> None:
    port = delivery_port.installed
    surface = bot.platform if bot is not None else event.source
    if port is None or port.surface(surface) is None:
        logger.warning("the /link answer cannot be sent on %s: no delivery adapter serves it", surface)
        return
    # `message.send` reads a run's bot and event (the chat to answer in); no run answers a command.
    stand_in = Run(workspace_id=event.workspace_id, bot=bot, event=event, conversation_id=event.conversation_id)
    try:
        port.action_deliver(run=stand_in, action="message.send", target={}, payload={"text": text})
    except DeliveryError:
        logger.warning("the /link answer was refused on %s", surface, exc_info=True)
