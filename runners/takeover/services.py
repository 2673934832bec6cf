"""Writes and reads of conversation holds (README "Human takeover").

`conversation_takeover` and `conversation_release` are the operator's; `handoff_request` is a runner's
(an `action.requested` result of the `handoff` kind); `conversation_held` is what the gateway asks at
admission; `takeover_context_fact` is what the first run after a release is told. Every change is
published to the conversation's live group (`conversation.hold`), so a chat open on it follows along; a
new handoff request is also handed to the `handoff_requested` observers (the completion webhooks) in its
transaction. Operator replies, which need platform delivery, are `runners.actions.operator`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from foundation.ports import Observers
from runners.live.publish import conversation_item_publish_on_commit
from runners.models import Run
from runners.takeover.models import OPEN_STATUSES, ConversationHold
from transcripts.models import EventLog, TranscriptItem

logger = logging.getLogger(__name__)

HELD = ConversationHold.Status.HELD
REQUESTED = ConversationHold.Status.REQUESTED
RELEASED = ConversationHold.Status.RELEASED
REASON_MAX = 500
FACT_MESSAGES_MAX = 50
FACT_TEXT_MAX = 2000
OPERATOR_ACTOR_TYPE = "operator"

handoff_requested_observers: Observers[ConversationHold] = Observers("handoff-requested")


class ConversationNotFoundError(Exception):
    """The workspace has no event in this conversation (another workspace's conversation is unknown too)."""


class ConversationNotHeldError(Exception):
    """The conversation is not held by a person (nothing to release, no operator to reply as)."""


def handoff_requested_observer_register(
    observer: Callable[[Sequence[ConversationHold]], None], *, after_commit: bool = False
) -> None:
    """Add an observer of new handoff requests (registered at start-up; `runners` never imports them)."""
    handoff_requested_observers.register(observer, after_commit=after_commit)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def hold_out(hold: ConversationHold) -> dict[str, Any]:
    """A hold as the REST API, the live message and the webhook show it."""
    return {
        "conversation_id": hold.conversation_id,
        "status": hold.status,
        "held_by": hold.held_by or None,
        "reason": hold.reason,
        "bot_id": hold.bot.bot_id if hold.bot is not None else None,
        "requested_by_run": str(hold.requested_by_run) if hold.requested_by_run else None,
        "requested_at": _iso(hold.requested_at),
        "started_at": _iso(hold.started_at),
        "ended_at": _iso(hold.ended_at),
        "ended_by": hold.ended_by or None,
    }


def _publish(hold: ConversationHold) -> None:
    conversation_item_publish_on_commit(
        workspace_id=hold.workspace_id,
        conversation_id=hold.conversation_id,
        message={"type": "conversation.hold", "hold": hold_out(hold)},
    )


def conversation_last_event(*, workspace_id: int, conversation_id: str) -> EventLog | None:
    """The conversation's newest event (its bot and chat are where replies go), or None when the workspace
    has none in it."""
    return (
        EventLog.objects.filter(workspace_id=workspace_id, conversation_id=conversation_id)
        .select_related("bot")
        .order_by("-id")
        .first()
    )


def conversation_hold_open(*, workspace_id: int, conversation_id: str) -> ConversationHold | None:
    return (
        ConversationHold.objects.filter(
            workspace_id=workspace_id, conversation_id=conversation_id, status__in=OPEN_STATUSES
        )
        .select_related("bot")
        .first()
    )


def conversation_held(*, workspace_id: int, conversation_id: str) -> bool:
    """Whether a person holds the conversation now: its messages then start no run (the gateway asks)."""
    return ConversationHold.objects.filter(
        workspace_id=workspace_id, conversation_id=conversation_id, status=HELD
    ).exists()


def conversation_takeover(
    *, workspace_id: int, conversation_id: str, operator: str, reason: str = ""
) -> ConversationHold:
    """Hold the conversation for `operator`. A conversation waiting for a human (a runner's request) is
    taken from the inbox; one already held stays as it is (whoever holds it). Raises
    `ConversationNotFoundError` for a conversation the workspace has no event in."""
    last = conversation_last_event(workspace_id=workspace_id, conversation_id=conversation_id)
    if last is None:
        raise ConversationNotFoundError(conversation_id)
    now = timezone.now()
    try:
        with transaction.atomic():
            hold = (
                ConversationHold.objects.select_for_update()
                .filter(workspace_id=workspace_id, conversation_id=conversation_id, status__in=OPEN_STATUSES)
                .first()
            )
            if hold is not None and hold.status == HELD:
                return hold
            if hold is None:
                hold = ConversationHold(
                    workspace_id=workspace_id, conversation_id=conversation_id, bot=last.bot, reason=reason[:REASON_MAX]
                )
            elif reason:
                hold.reason = reason[:REASON_MAX]
            hold.status, hold.held_by, hold.started_at = HELD, operator[:150], now
            hold.save()
            _publish(hold)
    except IntegrityError:
        # Another operator took it over at the same moment: theirs stands.
        found = conversation_hold_open(workspace_id=workspace_id, conversation_id=conversation_id)
        if found is None:
            raise
        return found
    logger.info("conversation %s of workspace %s taken over by %s", conversation_id, workspace_id, operator)
    return hold


def conversation_release(*, workspace_id: int, conversation_id: str, operator: str) -> ConversationHold:
    """Hand the conversation back to its bindings (a request still waiting in the inbox is dismissed the
    same way). Raises `ConversationNotHeldError` when nothing holds it."""
    with transaction.atomic():
        hold = (
            ConversationHold.objects.select_for_update()
            .filter(workspace_id=workspace_id, conversation_id=conversation_id, status__in=OPEN_STATUSES)
            .first()
        )
        if hold is None:
            raise ConversationNotHeldError(conversation_id)
        hold.status, hold.ended_at, hold.ended_by = RELEASED, timezone.now(), operator[:150]
        hold.save(update_fields=["status", "ended_at", "ended_by"])
        _publish(hold)
    logger.info("conversation %s of workspace %s released by %s", conversation_id, workspace_id, operator)
    return hold


def handoff_request(*, run: Run, reason: str) -> ConversationHold | None:
    """A runner asks for a human: the conversation goes to the inbox (`requested`) and the observers are
    told, in the caller's transaction. A conversation already waiting or held is left as it is (one
    notification per wait). A run without a conversation cannot be handed off (None)."""
    if not run.conversation_id:
        return None
    existing = conversation_hold_open(workspace_id=run.workspace_id, conversation_id=run.conversation_id)
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            hold = ConversationHold.objects.create(
                workspace_id=run.workspace_id,
                conversation_id=run.conversation_id,
                bot_id=run.bot_id,
                status=REQUESTED,
                reason=reason[:REASON_MAX],
                requested_by_run=run.run_id,
                requested_at=timezone.now(),
            )
    except IntegrityError:  # another run of the conversation asked at the same moment
        return conversation_hold_open(workspace_id=run.workspace_id, conversation_id=run.conversation_id)
    handoff_requested_observers.notify([hold])
    _publish(hold)
    logger.info("run %s asked for a human in conversation %s", run.run_id, run.conversation_id)
    return hold


def handoffs_waiting(*, workspace_ids: Sequence[int] | None = None) -> QuerySet[ConversationHold]:
    """Conversations waiting for a human, oldest request first (of these workspaces, else all)."""
    waiting = ConversationHold.objects.filter(status=REQUESTED)
    if workspace_ids is not None:
        waiting = waiting.filter(workspace_id__in=workspace_ids)
    return waiting.select_related("workspace", "bot").order_by("requested_at", "id")


def _fact_messages(hold: ConversationHold) -> tuple[list[dict[str, Any]], bool]:
    """What was said while the conversation was held: the users' messages (no run answered them) and the
    operators' replies, in order; the newest `FACT_MESSAGES_MAX` when there were more."""
    items = TranscriptItem.objects.filter(
        workspace_id=hold.workspace_id,
        conversation_id=hold.conversation_id,
        created_at__gte=hold.started_at,
        created_at__lte=hold.ended_at,
        role__in=[TranscriptItem.Role.USER, TranscriptItem.Role.ASSISTANT],
    ).order_by("-id")
    rows = list(items.only("role", "content", "actor", "created_at")[: FACT_MESSAGES_MAX + 1])
    messages = []
    for item in reversed(rows[:FACT_MESSAGES_MAX]):
        actor = item.actor if isinstance(item.actor, dict) else {}
        operator = actor.get("actor_type") == OPERATOR_ACTOR_TYPE
        if item.role == TranscriptItem.Role.ASSISTANT and not operator:
            continue  # a runner's reply finishing as the hold began is the runner's own to know
        messages.append(
            {
                "role": "operator" if operator else "user",
                "text": item.content[:FACT_TEXT_MAX],
                "created_at": _iso(item.created_at),
            }
        )
    return messages, len(rows) > FACT_MESSAGES_MAX


def takeover_context_fact(*, run: Run) -> dict[str, Any] | None:
    """`metadata.human_takeover` of the first run of a conversation made after a person handed it back:
    who held it, from when to when, why, and the messages of that span. Told once (the run that got it
    keeps getting it if it is retried); None for every other run."""
    if not run.conversation_id or run.is_observer:
        return None
    hold = (
        ConversationHold.objects.filter(
            workspace_id=run.workspace_id,
            conversation_id=run.conversation_id,
            status=RELEASED,
            started_at__isnull=False,
            ended_at__lte=run.created_at,
        )
        .order_by("-ended_at")
        .first()
    )
    if hold is None or (hold.reported_run_id is not None and hold.reported_run_id != run.run_id):
        return None
    claimed = ConversationHold.objects.filter(pk=hold.pk, reported_run_id__isnull=True).update(
        reported_run_id=run.run_id
    )
    if not claimed and hold.reported_run_id != run.run_id:
        return None  # another run of the conversation was told first
    messages, truncated = _fact_messages(hold)
    return {
        "held_by": hold.held_by,
        "reason": hold.reason,
        "started_at": _iso(hold.started_at),
        "ended_at": _iso(hold.ended_at),
        "messages": messages,
        "messages_truncated": truncated,
    }
