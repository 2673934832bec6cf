"""Telegram on python-telegram-bot: the Bot API webhook in, `sendMessage` / `editMessageText` /
`sendPhoto` / `sendDocument` / `setMessageReaction` out.

Credentials: `token` (from BotFather), `secret_token` (the webhook's `X-Telegram-Bot-Api-Secret-Token`,
required: an update without it is refused), optional `api_base_url` (a self-hosted Bot API server or a
proxy; default `https://api.telegram.org`) and `username` (the bot's @name, for mentions in groups; the
"Set the platform webhook" admin action fills it from `getMe`).

In groups the bot answers a command, a message that mentions it, or a reply to one of its messages; in
private chats it answers everything. A command `/cmd@otherbot` is someone else's. Other group messages
(delivered only with the bot's privacy mode off) are forwarded with `data.mentioned: false`, for a
binding with `group_always`.
"""

from __future__ import annotations

import hmac
import warnings
from datetime import timedelta
from typing import Any, ClassVar

import httpx
from telegram import Bot, InputFile, Message, ReactionTypeEmoji, ReplyParameters, Update
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError, TimedOut
from telegram.request import HTTPXRequest
from telegram.warnings import PTBDeprecationWarning

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.interface import (
    CredentialField,
    FetchedFile,
    InboundBatch,
    InboundRefusedError,
    InboundRequest,
    InboundUpdate,
    OutboundFile,
    PlatformAdapter,
    PlatformAPIError,
    PlatformCapabilities,
    PlatformFileRef,
    ReplyTarget,
    SentMessage,
    inbound_json_object,
    malformed_unless_shaped,
    platform_event_envelope,
    transport_failure,
)

DEFAULT_API_BASE_URL = "https://api.telegram.org"
# Connections kept to the Bot API per bot.
POOL_SIZE = 32
SECRET_HEADER = "x-telegram-bot-api-secret-token"
GROUP_CHATS = frozenset({"group", "supergroup"})
GROUP_WRITE_INTERVAL_SECONDS = 3.0
# What the webhook asks Telegram for: chat_member and message_reaction come only when asked for (and the
# bot is an administrator of the chat).
ALLOWED_UPDATES = ("message", "edited_message", "callback_query", "message_reaction", "chat_member", "my_chat_member")


# A member's statuses that are not in the chat ("restricted" is in it only while `is_member`).
_OUTSIDE = frozenset({"left", "kicked"})


def _member_in(member: Any) -> bool:
    return member.status != "restricted" or bool(getattr(member, "is_member", False))


def _reaction_name(reaction: Any) -> str:
    """An emoji as itself; a custom emoji by its id; a paid reaction as `paid`."""
    return str(getattr(reaction, "emoji", None) or getattr(reaction, "custom_emoji_id", None) or reaction.type)


def _retry_seconds(error: RetryAfter) -> float:
    with warnings.catch_warnings():
        # PTB 22 warns that `retry_after` becomes a timedelta in its next major version; both are read.
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class TelegramAdapter(PlatformAdapter):
    platform: ClassVar[str] = "telegram"
    # 4096 is the Bot API's limit on a message's text (UTF-16 code units, see `text_length`); about one
    # message a second per chat is what Telegram asks bots to stay under (its FAQ on broadcasting).
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=True,
        threads=True,
        max_message_chars=4096,
        edit_interval_seconds=1.0,
        max_file_bytes=50 * 1024 * 1024,
        event_types=(
            "member.joined",
            "member.left",
            "reaction.added",
            "reaction.removed",
            "message.edited",
            "card.clicked",
            "bot.added",
        ),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("token", "secret_token", "api_base_url", "username")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "token",
            required=True,
            secret=True,
            help="The bot's token: BotFather (/newbot, or /token for an existing bot) answers it.",
            link="https://t.me/BotFather",
            pattern=r"^[0-9]+:[A-Za-z0-9_-]+$",
            pattern_hint="a Telegram bot token (digits, a colon, then letters)",
        ),
        CredentialField(
            "secret_token",
            required=True,
            secret=True,
            help="A secret you choose (1-256 letters, digits, _ or -): Telegram sends it with every update "
            "and the host refuses updates without it. Set the platform webhook again after changing it.",
            link="https://core.telegram.org/bots/api#setwebhook",
            pattern=r"^[A-Za-z0-9_-]{1,256}$",
            pattern_hint="1-256 letters, digits, _ or -",
        ),
        CredentialField(
            "username",
            help="Optional: the bot's @name, for mentions in groups; filled by Test connection and by "
            "setting the platform webhook.",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: a self-hosted Bot API server or a proxy (default https://api.telegram.org).",
        ),
    )

    _client: Bot | None = None

    @staticmethod
    def text_length(text: str) -> int:
        return len(text.encode("utf-16-le")) // 2

    def write_interval_seconds(self, target: ReplyTarget) -> float:
        # Telegram lets a bot write about 20 messages a minute to one group (its FAQ on broadcasting);
        # group and channel chat ids are negative.
        if target.chat_id.startswith("-"):
            return GROUP_WRITE_INTERVAL_SECONDS
        return self.capabilities.edit_interval_seconds

    @property
    def token(self) -> str:
        return str(self.credentials.get("token") or "")

    @property
    def bot_user_id(self) -> int | None:
        head = self.token.split(":", 1)[0]
        return int(head) if head.isdigit() else None

    def client(self) -> Bot:
        if self._client is None:
            if not self.token:
                raise PlatformAPIError("the bot has no Telegram token (credentials.token)")
            base = self.api_base_url or DEFAULT_API_BASE_URL
            # Every connection (API calls and file downloads) goes through the outbound address guard; no
            # proxy from the environment makes a connection it cannot see.
            transport = guarded_async_transport(
                allow_private=self.allow_private, limits=httpx.Limits(max_connections=POOL_SIZE)
            )
            self._client = Bot(
                self.token,
                base_url=f"{base}/bot",
                base_file_url=f"{base}/file/bot",
                request=HTTPXRequest(
                    connection_pool_size=POOL_SIZE, httpx_kwargs={"transport": transport, "trust_env": False}
                ),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.shutdown()

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        expected = str(self.credentials.get("secret_token") or "")
        given = request.header(SECRET_HEADER)
        if not expected:
            raise InboundRefusedError("forged", "the bot has no secret_token; set one and call setWebhook again")
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise InboundRefusedError("forged", "the secret token header does not match", status=401)

    def parse(self, request: InboundRequest) -> InboundBatch:
        raw = inbound_json_object(request.body, what="not a Telegram update")
        with malformed_unless_shaped("not a Telegram update"):
            return self._batch(raw)

    def _batch(self, raw: dict[str, Any]) -> InboundBatch:
        update = Update.de_json(raw, None)
        if update is None:
            raise InboundRefusedError("malformed", "not a Telegram update", status=400)
        events = self._events(update, raw)
        if events is not None:
            response = None
            if update.callback_query is not None:
                # Answered in the webhook's own response (a Bot API method call Telegram carries out), so
                # the button stops spinning at once whatever the run does.
                response = {"method": "answerCallbackQuery", "callback_query_id": update.callback_query.id}
            return InboundBatch(updates=[InboundUpdate(envelope=e) for e in events], response=response)
        message = update.message
        if message is None or message.from_user is None:
            return InboundBatch()  # channel posts and the like: not handled, acknowledged
        addressed, text, command = self._addressed(message)
        if not addressed and self._others_command(message):
            return InboundBatch()  # `/cmd@otherbot` is someone else's, whatever the binding answers
        files = self._files(message)
        if not text and not files:
            return InboundBatch()
        envelope = self._envelope(update, message, raw, text, command)
        # A group message that does not address the bot is forwarded too (Telegram sends them only with the
        # bot's privacy mode off): the binding's trigger policy decides (`group_always`).
        envelope["data"]["mentioned"] = addressed
        return InboundBatch(updates=[InboundUpdate(envelope=envelope, files=files)])

    def _events(self, update: Update, raw: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The events beyond messages an update carries (docs/platform-events.md), or None when it is no
        such update. An update Telegram sends for a change that is no event of ours gives an empty list."""
        event_id = f"telegram:{self.bot_id}:{update.update_id}"
        if update.edited_message is not None:
            message = update.edited_message
            sender = message.from_user
            addressed, text, _ = self._addressed(message)
            if sender is None or not text:
                return []
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type="message.edited",
                    source_event_type="edited_message",
                    chat_id=str(message.chat.id),
                    chat_type=message.chat.type,
                    actor_id=str(sender.id),
                    actor_name=sender.full_name or sender.username,
                    target_message_id=str(message.message_id),
                    text=text,
                    thread_id=self._thread(message),
                    extra={"mentioned": addressed},
                    raw=raw,
                    event_time=(message.edit_date or message.date).timestamp(),
                )
            ]
        if update.callback_query is not None:
            query = update.callback_query
            where = query.message
            if where is None:
                return []  # a button of an inline-mode message: no chat to answer in
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type="card.clicked",
                    source_event_type="callback_query",
                    chat_id=str(where.chat.id),
                    chat_type=where.chat.type,
                    actor_id=str(query.from_user.id),
                    actor_name=query.from_user.full_name or query.from_user.username,
                    target_message_id=str(where.message_id),
                    action=query.data or query.game_short_name or "",
                    extra={"callback_query_id": query.id},
                    raw=raw,
                )
            ]
        if update.message_reaction is not None:
            reacted = update.message_reaction
            who = reacted.user or reacted.actor_chat
            who_name = getattr(who, "full_name", None) or getattr(who, "title", None) if who else None
            old = {_reaction_name(r) for r in reacted.old_reaction}
            new = {_reaction_name(r) for r in reacted.new_reaction}
            changes = [("reaction.added", r) for r in sorted(new - old)] + [
                ("reaction.removed", r) for r in sorted(old - new)
            ]
            return [
                platform_event_envelope(
                    event_id=f"{event_id}:{kind}:{reaction}",
                    event_type=kind,
                    source_event_type="message_reaction",
                    chat_id=str(reacted.chat.id),
                    chat_type=reacted.chat.type,
                    actor_id=str(who.id) if who else None,
                    actor_name=who_name,
                    target_message_id=str(reacted.message_id),
                    reaction=reaction,
                    raw=raw,
                    event_time=reacted.date.timestamp(),
                )
                for kind, reaction in changes
                if reaction
            ]
        changed = update.chat_member or update.my_chat_member
        if changed is not None:
            was = changed.old_chat_member.status in _OUTSIDE or not _member_in(changed.old_chat_member)
            now = changed.new_chat_member.status not in _OUTSIDE and _member_in(changed.new_chat_member)
            member = changed.new_chat_member.user
            if update.my_chat_member is not None:
                # The bot's own membership: only its arrival is an event; the actor is who added it.
                if not (was and now):
                    return []
                kind, actor = "bot.added", changed.from_user
            elif was and now:
                kind, actor = "member.joined", member
            elif not was and not now:
                kind, actor = "member.left", member
            else:
                return []  # a change of rights, not of membership
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type=kind,
                    source_event_type="my_chat_member" if update.my_chat_member is not None else "chat_member",
                    chat_id=str(changed.chat.id),
                    chat_type=changed.chat.type,
                    actor_id=str(actor.id),
                    actor_name=actor.full_name or actor.username,
                    extra={"operator_id": str(changed.from_user.id)} if changed.from_user.id != actor.id else None,
                    raw=raw,
                    event_time=changed.date.timestamp(),
                )
            ]
        return None

    @staticmethod
    def _thread(message: Message) -> str | None:
        return str(message.message_thread_id) if message.is_topic_message and message.message_thread_id else None

    def _addressed(self, message: Message) -> tuple[bool, str, str | None]:
        """Whether the bot is meant, the text without its @name, and the command (without `/` or @name)."""
        text = message.text or message.caption or ""
        username = str(self.credentials.get("username") or "").lstrip("@").lower()
        command: str | None = None
        mentioned = False
        entities = message.entities or message.caption_entities or ()
        for entity in entities:
            piece = text[entity.offset : entity.offset + entity.length]
            if entity.type == "bot_command" and entity.offset == 0:
                name, _, addressee = piece[1:].partition("@")
                if addressee and username and addressee.lower() != username:
                    return False, text, None
                command = name
            elif entity.type == "mention" and username and piece[1:].lower() == username:
                mentioned = True
                text = (text[: entity.offset] + text[entity.offset + entity.length :]).strip()
            elif entity.type == "text_mention" and entity.user is not None and entity.user.id == self.bot_user_id:
                mentioned = True
        if message.chat.type not in GROUP_CHATS:
            return True, text, command
        replied = message.reply_to_message
        to_bot = bool(replied and replied.from_user and replied.from_user.id == self.bot_user_id)
        return bool(command or mentioned or to_bot), text, command

    def _others_command(self, message: Message) -> bool:
        """Whether the message starts with a command for another bot (`/cmd@otherbot`)."""
        text = message.text or message.caption or ""
        username = str(self.credentials.get("username") or "").lstrip("@").lower()
        for entity in message.entities or message.caption_entities or ():
            if entity.type == "bot_command" and entity.offset == 0:
                addressee = text[entity.offset : entity.offset + entity.length].partition("@")[2]
                return bool(addressee and username and addressee.lower() != username)
        return False

    @staticmethod
    def _files(message: Message) -> list[PlatformFileRef]:
        files: list[PlatformFileRef] = []
        if message.photo:
            photo = message.photo[-1]  # Telegram lists the sizes smallest first
            files.append(
                PlatformFileRef(
                    ref={"file_id": photo.file_id, "file_unique_id": photo.file_unique_id},
                    name=f"photo-{photo.file_unique_id}.jpg",
                    mime_type="image/jpeg",
                    size=photo.file_size,
                    kind="image",
                )
            )
        if message.document:
            document = message.document
            files.append(
                PlatformFileRef(
                    ref={"file_id": document.file_id, "file_unique_id": document.file_unique_id},
                    name=document.file_name or f"document-{document.file_unique_id}",
                    mime_type=document.mime_type or "",
                    size=document.file_size,
                    kind="file",
                )
            )
        return files

    def _envelope(
        self, update: Update, message: Message, raw: dict[str, Any], text: str, command: str | None
    ) -> dict[str, Any]:
        sender = message.from_user
        assert sender is not None
        chat = message.chat
        thread = str(message.message_thread_id) if message.is_topic_message and message.message_thread_id else None
        target = ReplyTarget(
            chat_id=str(chat.id),
            thread_id=thread,
            reply_to_message_id=str(message.message_id) if chat.type in GROUP_CHATS else None,
        )
        return {
            "event_id": f"telegram:{self.bot_id}:{update.update_id}",
            "event_type": "message.received",
            "source_event_type": "message",
            "thread_id": thread,
            "actor": {
                "actor_type": "user",
                "actor_id": str(sender.id),
                "actor_name": (sender.full_name or sender.username or str(sender.id))[:255],
                "metadata": {k: v for k, v in {"username": sender.username, "is_bot": sender.is_bot}.items() if v},
            },
            "subject": {
                "subject_type": "message",
                "subject_id": str(message.message_id),
                "data": {"chat_type": chat.type, **({"chat_title": chat.title} if chat.title else {})},
            },
            "input": {"text": text or None},
            "data": {
                "chat_id": str(chat.id),
                "chat_type": chat.type,
                "reply_target": target.as_data(),
                **({"command": command} if command else {}),
                "raw": raw,
            },
            "event_time": message.date.timestamp(),
        }

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        file_id = str(ref.ref.get("file_id") or "")
        if not file_id:
            raise PlatformAPIError("the file reference has no file_id")
        data = await self._call(self._download, file_id)
        return FetchedFile(data=data, name=ref.name, mime_type=ref.mime_type)

    async def _download(self, file_id: str) -> bytes:
        file = await self.client().get_file(file_id)
        return bytes(await file.download_as_bytearray())

    # -- outbound -------------------------------------------------------------------------------
    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One SDK call, its errors as `PlatformAPIError` (429 with the wait Telegram asked for)."""
        try:
            return await fn(*args, **kwargs)
        except RetryAfter as exc:
            raise PlatformAPIError(str(exc), retry_after=_retry_seconds(exc)) from exc
        except (TimedOut, NetworkError) as exc:
            if isinstance(exc, BadRequest):
                raise PlatformAPIError(exc.message) from exc
            if isinstance(exc.__cause__, AddressRefusedError):
                # The outbound guard refused api_base_url's address: retrying cannot help.
                raise PlatformAPIError(f"refused: {exc.__cause__}") from exc
            # PTB raises both for httpx's errors (the cause) and for a 5xx answer (no transport cause):
            # only a connection never made proves the call was not carried out.
            raise transport_failure(str(exc), exc) from exc
        except TelegramError as exc:
            raise PlatformAPIError(exc.message) from exc

    @staticmethod
    def _where(target: ReplyTarget) -> dict[str, Any]:
        where: dict[str, Any] = {"chat_id": target.chat_id}
        if target.thread_id:
            where["message_thread_id"] = int(target.thread_id)
        if target.reply_to_message_id:
            where["reply_parameters"] = ReplyParameters(
                message_id=int(target.reply_to_message_id), allow_sending_without_reply=True
            )
        return where

    def mention_markup(self, actor: dict[str, Any]) -> str | None:
        # Telegram makes an @username in plain text a mention; a user without one cannot be mentioned
        # without formatting the whole reply, so they are quoted instead.
        username = (actor.get("metadata") or {}).get("username")
        return f"@{username}" if isinstance(username, str) and username else None

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        sent = await self._call(self.client().send_message, text=text, **self._where(target))
        return SentMessage(chat_id=str(sent.chat.id), message_id=str(sent.message_id))

    async def edit_text(self, message: SentMessage, text: str) -> None:
        try:
            await self._call(
                self.client().edit_message_text, text=text, chat_id=message.chat_id, message_id=int(message.message_id)
            )
        except PlatformAPIError as exc:
            # The same text again is no change to make, not a failure.
            if "message is not modified" not in str(exc).lower():
                raise

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        upload = InputFile(file.data, filename=file.name)
        where = self._where(target)
        caption = file.caption or None
        client = self.client()
        if file.mime_type in ("image/jpeg", "image/png", "image/webp") and len(file.data) <= 10 * 1024 * 1024:
            sent = await self._call(client.send_photo, photo=upload, caption=caption, **where)
        else:
            sent = await self._call(client.send_document, document=upload, caption=caption, **where)
        return SentMessage(chat_id=str(sent.chat.id), message_id=str(sent.message_id))

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        await self._call(
            self.client().set_message_reaction,
            chat_id=message.chat_id,
            message_id=int(message.message_id),
            reaction=[ReactionTypeEmoji(reaction)],
        )

    async def identity(self) -> str:
        me = await self._call(self.client().get_me)
        if me.username:
            self.credentials["username"] = me.username
        return f"Telegram knows this bot as @{me.username} (id {me.id})"

    async def webhook_register(self, url: str) -> str:
        secret = str(self.credentials.get("secret_token") or "")
        if not secret:
            raise PlatformAPIError("set credentials.secret_token first: Telegram sends it with every update")
        client = self.client()
        me = await self._call(client.get_me)
        await self._call(
            client.set_webhook,
            url=url,
            secret_token=secret,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=False,
        )
        if me.username:
            self.credentials["username"] = me.username
        return f"Telegram will post @{me.username}'s updates to {url}"
