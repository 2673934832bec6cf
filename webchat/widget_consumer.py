"""The website chat widget's socket `/ws/v1/widget/?ticket=` (README, "Website chat widget"): one anonymous
visitor talking to one web bot, over the debug chat's socket protocol (`webchat.consumers.ChatConsumer`, whose
subscription, replay, live delivery and backpressure this reuses unchanged).

What it adds is who may connect and what they may do:
- admitted only with a widget ticket (`webchat.widget`; the chat's tickets and sessions count for nothing here,
  and a widget ticket counts for nothing on the chat socket), from the origin the ticket was issued to, which
  must still be in the bot's `allowed_origins` (the bot still an enabled web bot): otherwise the handshake is
  refused (HTTP 403), and an unknown, used or expired ticket closes with 4401; a message after the bot stopped
  allowing the origin (or was disabled) answers `forbidden` and closes with 4403;
- the conversation is the visitor's own, derived from the ticket: `subscribe` takes no other (one naming
  another answers `forbidden`), `message` goes to the bot only (no binding choice, no attachments: an
  attachment names an artifact, which a visitor must not be able to point at), and `history` reads that
  conversation's transcript only; `cancel` and everything else are refused with `forbidden`;
- messages are rate-limited per visitor (`rate_limited` error frame with `retry_after`);
- what reaches the visitor is what a visitor should see: the replies' text and the runs' ends, not tool
  calls, binding or runner ids, nor the runs of observer bindings.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.utils import translation
from django.utils.translation import gettext as _
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from bindings.models import Bot, Workspace
from runners.models import Run
from transcripts.models import TranscriptItem
from transcripts.selectors import transcript_page
from webchat.chat import ChatCaller, ChatRefusedError, chat_message_submit
from webchat.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, ChatConsumer
from webchat.widget import (
    Visitor,
    WidgetGrant,
    message_limit_visitor,
    origin_normalized,
    visitor_conversation_id,
    widget_origin_allowed,
    widget_ticket_consume,
)

MESSAGE_MAX_CHARS = 4000
HISTORY_PAGE = 50
# Run results a visitor sees with their data; others pass as bare `{type}` (their ids keep the resume cursor whole).
VISITOR_EVENT_TYPES = frozenset({"message.delta", "message.completed", "run.completed", "run.failed"})
STATUS_KEYS = ("type", "run_id", "status", "event_id")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WidgetSubscribeIn(_Strict):
    type: Literal["subscribe"]
    conversation_id: Annotated[str, StringConstraints(max_length=255)] | None = None
    after_id: int | None = Field(default=None, ge=0)


class WidgetMessageIn(_Strict):
    type: Literal["message"]
    conversation_id: Annotated[str, StringConstraints(max_length=255)] | None = None
    text: Annotated[str, StringConstraints(min_length=1, max_length=MESSAGE_MAX_CHARS)]


class WidgetHistoryIn(_Strict):
    type: Literal["history"]
    before: int | None = Field(default=None, ge=1)


WIDGET_INBOUND: dict[str, type[BaseModel]] = {
    "subscribe": WidgetSubscribeIn, "message": WidgetMessageIn, "history": WidgetHistoryIn,
}  # fmt: skip


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _admitted_bot(grant: WidgetGrant, origin: str | None) -> Bot | None:
    """The grant's bot when it is still an enabled web bot and the handshake comes from the ticket's origin,
    which the bot still allows."""
    bot = (
        Bot.objects.filter(pk=grant.bot_pk, workspace_id=grant.workspace_id, enabled=True, platform=Bot.Platform.WEBUI)
        .defer("credentials")
        .first()
    )
    if bot is None or not widget_origin_allowed(bot, origin) or origin_normalized(origin or "") != grant.origin:
        return None
    return bot


def widget_history(*, workspace_id: int, conversation_id: str, before: int | None) -> dict[str, Any]:
    """A page of the visitor's own transcript, newest first: who said what, and when."""
    workspace = Workspace(pk=workspace_id)
    page = transcript_page(workspace=workspace, conversation_id=conversation_id, before=before, limit=HISTORY_PAGE)
    items = [
        {
            "id": item.id,
            "role": item.role,
            "content": item.content,
            "run_id": str(item.run_id) if item.run_id else None,
            "created_at": item.created_at.isoformat(),
        }
        for item in page.items
        if item.role in (TranscriptItem.Role.USER, TranscriptItem.Role.ASSISTANT)
    ]
    return {"type": "history", "items": items, "next_before": page.next_before}


def observer_runs(*, workspace_id: int, conversation_id: str | None = None, run_id: str = "") -> set[str]:
    """The observer runs of a conversation, or the one run named when it is an observer's."""
    runs = Run.objects.filter(workspace_id=workspace_id, is_observer=True)
    if conversation_id is not None:
        runs = runs.filter(conversation_id=conversation_id)
    else:
        try:
            runs = runs.filter(run_id=uuid.UUID(run_id))
        except ValueError:
            return set()
    return {str(r) for r in runs.values_list("run_id", flat=True)}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class WidgetConsumer(ChatConsumer):
    bot: Bot | None = None
    grant: WidgetGrant | None = None
    inbound_models = WIDGET_INBOUND

    async def connect(self) -> None:
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=self.send_queue_max)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._known_runs: set[str] = set()
        self._observer_runs: set[str] = set()
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        grant = await database_sync_to_async(widget_ticket_consume)(ticket=(query.get("ticket") or [""])[0])
        if grant is None:
            await self.accept()
            self._closing = True
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        bot = await database_sync_to_async(_admitted_bot)(grant, _header(self.scope, b"origin"))
        if bot is None:
            # Before accepting: the handshake is refused with HTTP 403, as the chat socket refuses a foreign origin.
            self._closing = True
            await self.close()
            return
        await self.accept()
        self.bot, self.grant, self.language = bot, grant, grant.language
        with translation.override(grant.language):
            name = _("Website visitor")
        self.caller = ChatCaller(bot.workspace_id, f"widget:{grant.visitor_id}", name)
        self.conversation_id = visitor_conversation_id(bot, Visitor(bot.pk, grant.visitor_id))
        self._tasks = [asyncio.create_task(self._send_loop()), asyncio.create_task(self._ping_loop())]

    def _unknown_type(self) -> None:
        self._error("forbidden", _("This chat only sends messages and reads its own history."))

    async def _dispatch(self, parsed: BaseModel) -> None:
        if getattr(parsed, "conversation_id", None) not in (None, self.conversation_id):
            self._error("forbidden", _("This chat may only use its own conversation."))
            return
        if isinstance(parsed, WidgetSubscribeIn):
            await self._join(self.conversation_id, parsed.after_id)
        elif isinstance(parsed, WidgetMessageIn):
            await self._on_visitor_message(parsed.text)
        elif isinstance(parsed, WidgetHistoryIn):
            assert self.caller is not None
            page = await database_sync_to_async(widget_history)(
                workspace_id=self.caller.workspace_id, conversation_id=self.conversation_id, before=parsed.before
            )
            self._deliver(page)

    async def _on_visitor_message(self, text: str) -> None:
        assert self.caller is not None
        assert self.bot is not None
        assert self.grant is not None
        limited = await database_sync_to_async(message_limit_visitor)(self.bot.pk, self.grant.visitor_id)
        if limited is not None:
            self._error(
                "rate_limited", _("Too many messages; wait a moment and send again."), retry_after=limited.retry_after
            )
            return
        bot = await database_sync_to_async(_admitted_bot)(self.grant, _header(self.scope, b"origin"))
        if bot is None:
            # The bot was disabled, or stopped allowing this site, since the socket opened.
            self._error("forbidden", _("This website may not use this chat widget."))
            self._closing = True
            await self.close(code=CLOSE_FORBIDDEN)
            return
        if self.subscription is None:
            # Joined before the event is ingested, so the run's first event cannot be missed.
            await self._join(self.conversation_id, None)
        try:
            submission = await database_sync_to_async(chat_message_submit)(
                caller=self.caller, conversation_id=self.conversation_id, text=text, attachments=[],
                bot_id=self.bot.bot_id,
            )  # fmt: skip
        except ChatRefusedError as refused:
            self._error(refused.code, refused.message)
            return
        for status in submission.statuses:
            run_id = str(status.get("run_id"))
            self._known_runs.add(run_id)
            if status.get("is_observer"):
                self._observer_runs.add(run_id)
            self._deliver(status)
        if submission.error is not None:
            self._error(submission.error["code"], submission.error["message"])

    async def _join(self, conversation_id: str, after_id: int | None) -> None:
        assert self.caller is not None
        # The conversation's observer runs, so that replaying them below shows the visitor nothing of theirs.
        self._observer_runs |= await database_sync_to_async(observer_runs)(
            workspace_id=self.caller.workspace_id, conversation_id=conversation_id
        )
        await super()._join(conversation_id, after_id)

    async def run_event(self, message: dict[str, Any]) -> None:
        await self._learn_run(str(message.get("run_id")))
        await super().run_event(message)

    async def run_status(self, message: dict[str, Any]) -> None:
        await self._learn_run(str(message.get("run_id")))
        await super().run_status(message)

    async def _learn_run(self, run_id: str) -> None:
        """Whether a run first seen live is an observer's (a message sent from another tab of the visitor)."""
        if run_id in self._known_runs or self.caller is None:
            return
        self._known_runs.add(run_id)
        self._observer_runs |= await database_sync_to_async(observer_runs)(
            workspace_id=self.caller.workspace_id, run_id=run_id
        )

    async def transcript_item(self, message: dict[str, Any]) -> None:
        # A runner's platform action (send, edit, react) on this conversation: its text only.
        item = _dict(message.get("item"))
        if self.subscription is not None and not self._closing and message.get("action") == "message.send":
            self._deliver({"type": "transcript.item", "action": "message.send",
                           "item": {"role": "assistant", "content": str(item.get("content") or "")}})  # fmt: skip

    async def conversation_hold(self, message: dict[str, Any]) -> None:
        # Whether a person took the conversation over; who, and why, stay with the operators.
        if self.subscription is not None and not self._closing:
            self._deliver({"type": "conversation.hold", "held": bool(message.get("hold"))})

    def _deliver(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind in ("run.event", "run.status") and str(message.get("run_id")) in getattr(self, "_observer_runs", ()):
            return
        if kind == "run.event":
            event = _dict(message.get("event"))
            shown = {"type": event.get("type")}
            if event.get("type") in VISITOR_EVENT_TYPES:
                shown["data"] = _visitor_data(event.get("type"), _dict(event.get("data")))
            message = {k: message[k] for k in ("type", "id", "run_id", "seq", "position") if k in message}
            message["event"] = shown
        elif kind == "run.status":
            message = {k: message[k] for k in STATUS_KEYS if k in message}
        super()._deliver(message)


def _visitor_data(kind: Any, data: dict[str, Any]) -> dict[str, Any]:
    if kind == "message.delta":
        return {"chunk": {"content": _dict(data.get("chunk")).get("content")}}
    if kind == "message.completed":
        return {"message": {"content": _dict(data.get("message")).get("content")}}
    if kind == "run.failed":
        return {"code": data.get("code")}
    return {}
