"""The chat WebSocket `/ws/v1/chat/` (docs/architecture.md, "Live delivery"): subscribe to a conversation's run events,
post messages through the Event Gateway (source `webui`) and cancel runs.

Thin by design: who the caller is comes from `caller_from_scope`, reads from `runners.live.streaming`, writes
from `webchat.chat` and `runners.lifecycle.services`, all wrapped in `database_sync_to_async`. That closes stale
connections after every call, and with `CONN_MAX_AGE = 0` (which the pool requires) every connection is
stale: an open socket holds no database connection while it waits for live events.

Close codes (the README lists them too):
- 4401 not authenticated: no session and no ticket, or a ticket that is unknown, used or expired;
- 4403 authenticated but without a workspace to act in (no membership, or several and no `?workspace=`);
- 4408 too slow: the client stopped reading and its send queue overflowed (others are not held up).
A handshake from an origin outside `ALLOWED_HOSTS` is refused before it reaches this consumer (HTTP 403);
the consumer then refuses (HTTP 403 too) an origin whose scheme, host and port are not those the socket is
served at, unless `LANGBOT_WS_ALLOWED_ORIGINS` lists it (`webchat.origins`).

Input: a message nested deeper than `LANGBOT_API_JSON_MAX_DEPTH`, or a binary frame, answers an error
frame (`invalid_argument`) and the socket stays open.

Delivery: channel-layer handlers only put messages into a bounded per-connection queue that one sender
task drains, so a client that stops reading never slows the consumer's channel (or anyone's group
delivery); when the queue is full the connection is closed with 4408. Daphne applies no backpressure of
its own (it buffers whatever is sent, without bound), so the sender applies it: while daphne holds more
than `send_buffer_max_bytes` unsent for this connection it waits, and when that lasts
`send_stall_seconds` the client is too slow as well. The 4408 close frame then queues behind at most
that much, and the close handshake waits `close_wait_seconds` (not autobahn's 1 s, and without the
protocol pings that would abort the connection first): a client that reads again within it gets the
frames sent before the close and then the 4408 close, not a TCP reset; one that never does is dropped.
Keepalive: the server sends `{"type":"ping"}` every `ping_seconds` (clients ignore it; a browser can
use its absence to notice a dead connection), beside daphne's protocol-level pings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import HttpRequest
from django.utils import translation
from django.utils.translation import gettext as _
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from bindings.models import Workspace
from bindings.selectors import WorkspaceChoiceError, workspace_for_user
from foundation.api_errors import field_errors
from foundation.compat.autobahn import close_handshake_wait, server_send_backlog
from foundation.limits import TOO_DEEP_MESSAGE, json_too_deep
from foundation.storable import UNSTORABLE_MESSAGE, is_storable, unstorable_text_path
from gateway.envelope import AttachmentIn
from runners.live.publish import conversation_group
from runners.live.streaming import (
    REPLAY_PAGE_SIZE,
    RunCursor,
    client_event,
    conversation_events_after,
    conversation_events_between,
    conversation_exists,
    conversation_now,
    conversation_position_at,
    live_conversation_event,
    live_conversation_status,
    run_events_range,
    runs_events_upto,
)
from webchat.chat import ChatCaller, ChatRefusedError, chat_message_submit, chat_run_cancel
from webchat.origins import origin_allowed
from webchat.tickets import ws_ticket_consume
from webchat.trying import try_caller_allowed, try_conversation_prefix

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_TOO_SLOW = 4408

# Channel-layer messages (from `runners.live.publish`) handled without a trip through the sync thread.
LIVE_MESSAGE_TYPES = frozenset({"run.event", "run.status", "transcript.item", "conversation.hold"})

# What a `transcript.item` from `runners.live.publish` carries to the client; anything else stays on the server.
TRANSCRIPT_ITEM_KEYS = ("type", "action", "run_id", "item", "reaction")

ConversationId = Annotated[str, StringConstraints(min_length=1, max_length=255)]


class _CallerRefusedError(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def scope_language(scope: dict[str, Any]) -> str:
    """The language of the page that opened the socket, chosen as LocaleMiddleware chooses a page's: the
    language switch's cookie, else the browser's Accept-Language, else the default."""
    request = HttpRequest()
    request.COOKIES = dict(scope.get("cookies") or {})
    for name, value in scope.get("headers") or []:
        if name == b"accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = value.decode("latin-1")
    return translation.get_language_from_request(request)


def caller_from_scope(scope: dict[str, Any]) -> ChatCaller:
    """Who is connecting: a `?ticket=` wins over the session. Raises `_CallerRefusedError(close code)`."""
    query = parse_qs(scope.get("query_string", b"").decode("latin1"))
    ticket = (query.get("ticket") or [""])[0]
    if ticket:
        grant = ws_ticket_consume(ticket=ticket)
        if grant is None:
            raise _CallerRefusedError(CLOSE_UNAUTHENTICATED)
        if grant.binding_id is not None and not try_caller_allowed(grant):
            # A binding's try-it ticket serves only staff of its workspace, checked again as it is used.
            raise _CallerRefusedError(CLOSE_FORBIDDEN)
        return ChatCaller(grant.workspace_id, grant.principal, grant.display_name, grant.binding_id)
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        raise _CallerRefusedError(CLOSE_UNAUTHENTICATED)
    requested = (query.get("workspace") or [""])[0] or None
    if requested is not None and not is_storable(requested):
        # No workspace has such a slug, and the database would fail the lookup.
        raise _CallerRefusedError(CLOSE_FORBIDDEN)
    try:
        workspace: Workspace = workspace_for_user(user=user, requested_slug=requested)
    except WorkspaceChoiceError:
        raise _CallerRefusedError(CLOSE_FORBIDDEN) from None
    return ChatCaller(workspace.pk, f"user:{user.pk}", user.get_full_name() or user.get_username())


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubscribeIn(_Strict):
    type: Literal["subscribe"]
    conversation_id: ConversationId
    after_id: int | None = Field(default=None, ge=0)


class MessageIn(_Strict):
    type: Literal["message"]
    conversation_id: ConversationId | None = None
    binding_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    bot_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    text: str = Field(default="", max_length=100_000)
    attachments: list[AttachmentIn] = Field(default_factory=list, max_length=100)


class CancelIn(_Strict):
    type: Literal["cancel"]
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]


INBOUND: dict[str, type[BaseModel]] = {"subscribe": SubscribeIn, "message": MessageIn, "cancel": CancelIn}


@dataclass
class _Subscription:
    conversation_id: str
    group: str
    cursor: RunCursor


class ChatConsumer(AsyncJsonWebsocketConsumer):
    send_queue_max = 1000
    send_buffer_max_bytes = 256 * 1024
    send_stall_seconds = settings.LANGBOT_WS_SEND_STALL_SECONDS
    close_wait_seconds = settings.LANGBOT_WS_CLOSE_WAIT_SECONDS
    ping_seconds = 20.0

    caller: ChatCaller | None = None
    subscription: _Subscription | None = None
    # The frames a client may send, by `type` (the website widget's socket narrows them).
    inbound_models: dict[str, type[BaseModel]] = INBOUND

    async def connect(self) -> None:
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=self.send_queue_max)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        if not origin_allowed(self.scope):
            # Before accepting: the handshake is refused with HTTP 403, as for a host outside ALLOWED_HOSTS.
            self._closing = True
            await self.close()
            return
        # Accept first: a close before accepting becomes an HTTP 403 without the documented close code.
        await self.accept()
        self.language = scope_language(self.scope)
        try:
            self.caller = await database_sync_to_async(caller_from_scope)(self.scope)
        except _CallerRefusedError as refused:
            self._closing = True
            await self.close(code=refused.code)
            return
        self._tasks = [asyncio.create_task(self._send_loop()), asyncio.create_task(self._ping_loop())]

    async def disconnect(self, code: int) -> None:
        self._closing = True
        for task in getattr(self, "_tasks", []):
            task.cancel()
        await self._leave()

    # --- client → server ------------------------------------------------------------------------------

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.caller is None or self._closing:
            return
        parsed = self._inbound(content)
        if parsed is not None:
            await self._dispatch(parsed)

    def _unknown_type(self) -> None:
        self._error("invalid_argument", _("Unknown message type; expected subscribe, message or cancel."))

    def _inbound(self, content: Any) -> BaseModel | None:
        """The client's frame as its model (of `inbound_models`), or None once the error frame is sent."""
        kind = content.get("type") if isinstance(content, dict) else None
        model = self.inbound_models.get(kind) if isinstance(kind, str) else None
        if model is None:
            self._unknown_type()
            return None
        try:
            parsed = model.model_validate(content)
        except ValidationError as exc:
            self._error("invalid_argument", _("The message has invalid fields."), fields=field_errors(exc))
            return None
        unstorable = unstorable_text_path(content)
        if unstorable is not None:
            # Refused here: the database would fail the submission, and with it this socket.
            fields = {unstorable or "(message)": _(UNSTORABLE_MESSAGE)}
            self._error("invalid_argument", _("The message has invalid fields."), fields=fields)
            return None
        return parsed

    async def _dispatch(self, parsed: BaseModel) -> None:
        if isinstance(parsed, SubscribeIn):
            await self._on_subscribe(parsed)
        elif isinstance(parsed, MessageIn):
            await self._on_message(parsed)
        elif isinstance(parsed, CancelIn):
            await self._on_cancel(parsed)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        # The error messages a chat user reads are in the page's language (the handlers' threads inherit it).
        with translation.override(getattr(self, "language", None)):
            await self._receive(text_data, **kwargs)

    async def _receive(self, text_data: str | None, **kwargs: Any) -> None:
        if self.caller is None or self._closing:
            return
        if text_data is None:
            self._error("invalid_argument", _("Binary frames are not accepted; send each message as JSON text."))
            return
        max_depth = settings.LANGBOT_API_JSON_MAX_DEPTH
        where = json_too_deep(text_data.encode(), max_depth)
        if where is not None:
            # Refused before parsing: the parser and the models would recurse past Python's limit.
            fields = {"(message)" if where == "(body)" else where: _(TOO_DEEP_MESSAGE) % {"depth": max_depth}}
            self._error("invalid_argument", _("The message has invalid fields."), fields=fields)
            return
        await super().receive(text_data=text_data, **kwargs)

    async def decode_json(self, text_data: str) -> Any:
        try:
            return await super().decode_json(text_data)
        except ValueError:
            return None

    def _try_refused(self, conversation_id: str | None, binding_id: str | None = None) -> bool:
        """Whether a try-it socket (a binding's admin box) asks for more than its binding's own
        conversations; it is told so with a `forbidden` error."""
        assert self.caller is not None
        only = self.caller.binding_id
        if only is None:
            return False
        if (conversation_id is None or conversation_id.startswith(try_conversation_prefix(only))) and (
            binding_id == only
        ):
            return False
        self._error("forbidden", _("This connection may only send to binding %(id)r.") % {"id": only})
        return True

    async def _on_subscribe(self, request: SubscribeIn) -> None:
        assert self.caller is not None
        if self._try_refused(request.conversation_id, self.caller.binding_id):
            return
        exists = await database_sync_to_async(conversation_exists)(
            workspace_id=self.caller.workspace_id, conversation_id=request.conversation_id
        )
        if not exists:
            # The same answer for a conversation of another workspace as for one that does not exist.
            self._error("not_found", _("No conversation %(id)r in this workspace.") % {"id": request.conversation_id})
            return
        await self._join(request.conversation_id, request.after_id)

    async def _on_message(self, request: MessageIn) -> None:
        assert self.caller is not None
        if self._try_refused(request.conversation_id, request.binding_id):
            return
        prefix = try_conversation_prefix(self.caller.binding_id) if self.caller.binding_id else "webui:"
        conversation_id = request.conversation_id or f"{prefix}{uuid.uuid4().hex}"
        if self.subscription is None or self.subscription.conversation_id != conversation_id:
            # Joined before the event is ingested, so the run's first event cannot be missed.
            await self._join(conversation_id, None)
        try:
            submission = await database_sync_to_async(chat_message_submit)(
                caller=self.caller,
                conversation_id=conversation_id,
                binding_id=request.binding_id,
                bot_id=request.bot_id,
                text=request.text,
                attachments=request.attachments,
            )
        except ChatRefusedError as refused:
            self._error(refused.code, refused.message, **refused.details)
            return
        for status in submission.statuses:
            self._deliver(status)
        if submission.error is not None:
            self._error(submission.error["code"], submission.error["message"], event_id=submission.event_id)

    async def _on_cancel(self, request: CancelIn) -> None:
        assert self.caller is not None
        if self.caller.binding_id is not None:
            # A try-it socket only sends; a run id could name any run of the workspace.
            self._try_refused(None)
            return
        try:
            status = await database_sync_to_async(chat_run_cancel)(caller=self.caller, run_id=request.run_id)
        except ChatRefusedError as refused:
            self._error(refused.code, refused.message, **refused.details)
            return
        self._deliver(status)

    # --- subscription ---------------------------------------------------------------------------------

    async def _join(self, conversation_id: str, after_id: int | None) -> None:
        """Join the conversation's group, then replay from the database; live messages that arrive
        meanwhile wait in this consumer's channel and pass the cursor afterwards."""
        assert self.caller is not None
        await self._leave()
        workspace_id = self.caller.workspace_id
        group = conversation_group(workspace_id=workspace_id, conversation_id=conversation_id)
        await self.channel_layer.group_add(group, self.channel_name)
        if after_id is not None:
            # Where `after_id` stands in the conversation; the replay below moves on from there in order.
            position = await database_sync_to_async(conversation_position_at)(
                workspace_id=workspace_id, conversation_id=conversation_id, event_id=after_id
            )
            cursor = RunCursor(floor_id=after_id, last_position=position)
            self.subscription = _Subscription(conversation_id, group, cursor)
            while True:
                page = await database_sync_to_async(conversation_events_after)(
                    workspace_id=workspace_id, conversation_id=conversation_id, after_id=cursor.last_id
                )
                for message in page:
                    self._forward(message)
                if len(page) < REPLAY_PAGE_SIZE or self._closing:
                    break
        else:
            # Without a cursor: what is in progress (the active runs, from their start), then live.
            floor, position, active = await database_sync_to_async(conversation_now)(
                workspace_id=workspace_id, conversation_id=conversation_id
            )
            cursor = RunCursor(floor_id=floor, last_position=position)
            self.subscription = _Subscription(conversation_id, group, cursor)
            for run_id in active:
                cursor.expect(run_id)
            # The active runs from their start up to the floor, in id order, as several runs' events were
            # committed (so a client's cursor never passes one it has not received); later ones come live.
            after = 0
            while active and not self._closing:
                page = await database_sync_to_async(runs_events_upto)(
                    workspace_id=workspace_id, run_ids=active, after_id=after, max_id=floor
                )
                for message in page:
                    after = int(message["id"])
                    self._forward(message)
                if len(page) < REPLAY_PAGE_SIZE:
                    break
        self._deliver({"type": "subscribed", "conversation_id": conversation_id, "last_id": cursor.last_id})

    async def _leave(self) -> None:
        if self.subscription is not None:
            group, self.subscription = self.subscription.group, None
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(group, self.channel_name)

    async def _read(self, run_id: str, after_seq: int, before_seq: int | None, min_id: int) -> list[dict[str, Any]]:
        assert self.caller is not None
        return await database_sync_to_async(run_events_range)(
            workspace_id=self.caller.workspace_id, run_id=run_id, after_seq=after_seq,
            before_seq=before_seq, min_id=min_id,
        )  # fmt: skip

    async def _read_conversation(self, after_position: int, before_position: int | None) -> list[dict[str, Any]]:
        assert self.caller is not None
        assert self.subscription is not None
        return await database_sync_to_async(conversation_events_between)(
            workspace_id=self.caller.workspace_id, conversation_id=self.subscription.conversation_id,
            after_position=after_position, before_position=before_position,
        )  # fmt: skip

    async def _deliver_all(self, messages: AsyncIterator[dict[str, Any]]) -> None:
        async for message in messages:
            self._deliver(message)
            if self._closing:
                return

    def _forward(self, message: dict[str, Any]) -> None:
        assert self.subscription is not None
        if self.subscription.cursor.take(message):
            self._deliver(message)

    # --- channel layer → client -----------------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every handler, on the one thread-sensitive
        # sync thread — so each live event would queue behind every database call of this process (100
        # chat submissions at once held live delivery back ~2 s). The live handlers reach the database
        # only through `database_sync_to_async`, which closes stale connections itself.
        if message.get("type") in LIVE_MESSAGE_TYPES:
            await getattr(self, get_handler_name(message))(message)
            return
        await super().dispatch(message)

    async def run_event(self, message: dict[str, Any]) -> None:
        subscription = self.subscription
        if subscription is None or self._closing:
            return
        event = {k: message[k] for k in ("type", "id", "run_id", "seq", "event", "position") if k in message}
        await self._deliver_all(
            live_conversation_event(subscription.cursor, self._read, self._read_conversation, event)
        )

    async def run_status(self, message: dict[str, Any]) -> None:
        subscription = self.subscription
        if subscription is None or self._closing:
            return
        await self._deliver_all(
            live_conversation_status(subscription.cursor, self._read, self._read_conversation, message)
        )
        self._deliver({k: message[k] for k in ("type", "run_id", "status", "status_reason") if k in message})

    async def transcript_item(self, message: dict[str, Any]) -> None:
        """A transcript change made outside a run's result stream: a runner's platform action (`message.send`,
        `message.edit`, `reaction.add`) delivered on the web/API surface. Not part of the resume cursor —
        the transcript API is its durable form — so it is passed on as it comes."""
        if self.subscription is not None and not self._closing:
            self._deliver({k: message[k] for k in TRANSCRIPT_ITEM_KEYS if k in message})

    async def conversation_hold(self, message: dict[str, Any]) -> None:
        """The conversation was taken over, released, or its runner asked for a human (human takeover)."""
        if self.subscription is not None and not self._closing:
            self._deliver({"type": "conversation.hold", "hold": message.get("hold")})

    # --- sending --------------------------------------------------------------------------------------

    def _error(self, code: str, message: str, **details: Any) -> None:
        payload: dict[str, Any] = {"type": "error", "code": code, "message": message}
        if details:
            payload["details"] = details
        self._deliver(payload)

    def _deliver(self, message: dict[str, Any]) -> None:
        if self._closing:
            return
        if message.get("type") == "run.event":
            message = client_event(message)
        try:
            self._outbox.put_nowait(message)
        except asyncio.QueueFull:
            self._too_slow()

    def _too_slow(self) -> None:
        if self._closing:
            return
        self._closing = True
        logger.info("closing a chat WebSocket whose client stopped reading (%s)", self.channel_name)
        for task in self._tasks:
            task.cancel()
        self._tasks = [asyncio.create_task(self._close_too_slow())]

    async def _close_too_slow(self) -> None:
        await self._leave()
        close_handshake_wait(self.base_send, self.close_wait_seconds)
        await self.close(code=CLOSE_TOO_SLOW)

    async def _send_loop(self) -> None:
        while True:
            message = await self._outbox.get()
            await self.send_json(message)
            if not await self._drained():
                self._too_slow()
                return

    async def _drained(self) -> bool:
        """Wait while daphne holds more than `send_buffer_max_bytes` unsent; False when the client has not
        taken it within `send_stall_seconds`."""
        backlog = server_send_backlog(self.base_send)
        if backlog is None or backlog <= self.send_buffer_max_bytes:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.send_stall_seconds
        while loop.time() < deadline:
            await asyncio.sleep(0.02)
            backlog = server_send_backlog(self.base_send)
            if backlog is None or backlog <= self.send_buffer_max_bytes:
                return True
        return False

    async def _ping_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ping_seconds)
            self._deliver({"type": "ping"})
