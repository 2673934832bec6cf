"""Slack on slack-sdk: the Events API in (signed requests, URL verification), `chat.postMessage` /
`chat.update` / `reactions.add` and the files upload v2 flow out, files in fetched with the bot token.

Credentials: `bot_token` (`xoxb-...`), `signing_secret` (the app's Signing Secret, required: an unsigned
request is refused), optional `api_base_url` (the Web API's base, default `https://slack.com/api`; a proxy
or Slack's GovSlack host).

The bot answers direct messages, and in channels the messages that mention it (`app_mention`); there it
answers in the thread of the message that asked; with `thread_follow_ups` on, a later reply in a thread it
answered in is answered without a mention. Other channel messages (with the message.channels /
message.groups subscriptions) are forwarded with `data.mentioned: false`, for a binding with
`group_always`. Member joins and leaves, reactions, edits, deletions, the bot
joining a channel and `block_actions` (interactivity requests, form-encoded, to the same URL) are events of
their own (docs/platform-events.md). Its own messages and other bots' are ignored, so it never
answers itself. Slack redelivers an event it did not see acknowledged within 3 s (`X-Slack-Retry-Num`);
the event's `event_id` makes a redelivery the same gateway event.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import aiohttp
import httpx
from django.core.cache import cache
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.interface import (
    FLAG_PATTERN,
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
    credential_flag,
    inbound_json_object,
    malformed_unless_shaped,
    platform_event_envelope,
    transport_failure,
)

DEFAULT_API_BASE_URL = "https://slack.com/api"
# Slack's own replay window: a request signed more than five minutes ago is refused.
REPLAY_WINDOW_SECONDS = 5 * 60
# Message subtypes that are still a person writing (a message with files arrives as `file_share`).
USER_SUBTYPES = frozenset({"file_share", "thread_broadcast"})
FILE_DOWNLOAD_TIMEOUT = 60.0
# How long a thread the bot answered in stays one whose follow-ups it answers without a mention.
THREAD_FOLLOW_SECONDS = 7 * 24 * 3600


def thread_key(bot_id: str, channel: str, thread_ts: str) -> str:
    """The cache key marking a thread the bot wrote in (shared by the web and worker processes)."""
    return f"platforms:slack:thread:{bot_id}:{channel}:{thread_ts}"


# A conversation's kind from its id's first letter, for events that do not say (reactions): C public
# channel, G private channel or group DM, D direct message.
_CHANNEL_TYPES = {"C": "channel", "G": "group", "D": "im"}


def _chat_type_of(channel: str) -> str:
    return _CHANNEL_TYPES.get(channel[:1], "channel")


def _file_kind(mime_type: str) -> str:
    head = mime_type.split("/", 1)[0]
    return head if head in ("image", "audio", "video") else "file"


class SlackAdapter(PlatformAdapter):
    platform: ClassVar[str] = "slack"
    # Slack truncates a message's text past 40,000 characters and asks apps to keep it within 4,000;
    # chat.postMessage allows about one message a second per channel, chat.update is Tier 3 (50+/min).
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=True,
        threads=True,
        max_message_chars=4000,
        edit_interval_seconds=1.0,
        max_file_bytes=1024 * 1024 * 1024,
        event_types=(
            "member.joined",
            "member.left",
            "reaction.added",
            "reaction.removed",
            "message.recalled",
            "message.edited",
            "card.clicked",
            "bot.added",
        ),
    )
    credential_keys: ClassVar[tuple[str, ...]] = (
        "bot_token",
        "signing_secret",
        "api_base_url",
        "thread_follow_ups",
    )
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "bot_token",
            required=True,
            secret=True,
            help="The Bot User OAuth Token: the Slack app's page → OAuth & Permissions (install the app first).",
            link="https://api.slack.com/apps",
            pattern=r"^xoxb-",
            pattern_hint="a bot token (starting xoxb-)",
        ),
        CredentialField(
            "signing_secret",
            required=True,
            secret=True,
            help="The Signing Secret: the Slack app's page → Basic Information → App Credentials. It signs "
            "every request Slack sends.",
            link="https://api.slack.com/apps",
        ),
        CredentialField("api_base_url", help="Optional: the Web API's origin (default https://slack.com/api)."),
        CredentialField(
            "thread_follow_ups",
            types=("boolean", "string"),
            pattern=FLAG_PATTERN,
            pattern_hint="yes or no (true/false)",
            help="Optional (default off): in a channel thread the bot has answered in, a reply without a "
            "mention is taken as addressed to the bot. Needs the message.channels / message.groups events.",
        ),
    )

    _client: AsyncWebClient | None = None

    @property
    def bot_token(self) -> str:
        return str(self.credentials.get("bot_token") or "")

    @property
    def base_url(self) -> str:
        return f"{self.api_base_url or DEFAULT_API_BASE_URL}/"

    def client(self) -> AsyncWebClient:
        if self._client is None:
            if not self.bot_token:
                raise PlatformAPIError("the bot has no Slack bot token (credentials.bot_token)")
            # No retry handlers: the SDK's default one sends a call again after the server hung up, which
            # may be after Slack posted the message. The host's delivery retries what is safe to repeat.
            self._client = AsyncWebClient(token=self.bot_token, base_url=self.base_url, retry_handlers=[])
        return self._client

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        secret = str(self.credentials.get("signing_secret") or "")
        if not secret:
            raise InboundRefusedError("forged", "the bot has no signing_secret; copy it from the Slack app's page")
        timestamp = request.header("x-slack-request-timestamp")
        signature = request.header("x-slack-signature")
        if not timestamp or not signature:
            raise InboundRefusedError("forged", "the request is not signed by Slack", status=401)
        try:
            age = abs(time.time() - int(timestamp))
        except (ValueError, OverflowError):  # not digits, or more of them than a float holds
            raise InboundRefusedError("forged", "the request timestamp is not a number", status=401) from None
        if age > REPLAY_WINDOW_SECONDS:
            raise InboundRefusedError("replayed", "the request was signed more than five minutes ago", status=401)
        try:
            body = request.body.decode("utf-8")  # the SDK's verifier decodes it, and fails on other bytes
        except UnicodeDecodeError:
            raise InboundRefusedError("malformed", "not a Slack Events API request: not UTF-8", status=400) from None
        if not SignatureVerifier(secret).is_valid(body=body, timestamp=timestamp, signature=signature):
            raise InboundRefusedError("forged", "the Slack signature does not match", status=401)

    def parse(self, request: InboundRequest) -> InboundBatch:
        if request.body.startswith(b"payload="):
            # An interactivity request (a button in a message): form-encoded, its JSON in `payload`.
            try:
                form = parse_qs(request.body.decode("utf-8"), strict_parsing=True)
            except (UnicodeDecodeError, ValueError):
                raise InboundRefusedError("malformed", "not a Slack interaction: bad form", status=400) from None
            interaction = inbound_json_object((form.get("payload") or [""])[0], what="not a Slack interaction")
            with malformed_unless_shaped("not a Slack interaction"):
                return self._interaction(interaction)
        payload = inbound_json_object(request.body, what="not a Slack Events API request")
        with malformed_unless_shaped("not a Slack Events API request"):
            return self._batch(payload)

    def _interaction(self, payload: dict[str, Any]) -> InboundBatch:
        """`block_actions` (a button or menu in a message the bot sent) → `card.clicked`, one per action."""
        if payload.get("type") != "block_actions":
            return InboundBatch()  # shortcuts, modals: not handled, acknowledged
        user = payload.get("user") or {}
        container = payload.get("container") or {}
        channel = str((payload.get("channel") or {}).get("id") or container.get("channel_id") or "")
        if not channel:
            return InboundBatch()  # an action in a modal or on the app's home tab: no chat to answer in
        message = payload.get("message") or {}
        message_ts = str(container.get("message_ts") or message.get("ts") or "")
        thread = message.get("thread_ts") or None
        updates = []
        for index, action in enumerate(payload.get("actions") or ()):
            value = action.get("value")
            if value is None:
                selected = action.get("selected_option") or {}
                value = selected.get("value") if isinstance(selected, dict) else None
            delivery = str(payload.get("trigger_id") or action.get("action_ts") or "")
            envelope = platform_event_envelope(
                event_id=f"slack:{self.bot_id}:{delivery}:{index}",
                event_type="card.clicked",
                source_event_type="block_actions",
                chat_id=channel,
                chat_type=_chat_type_of(channel),
                actor_id=str(user.get("id") or "") or None,
                actor_name=user.get("name") or user.get("username"),
                target_message_id=message_ts or None,
                action={"action_id": action.get("action_id"), "block_id": action.get("block_id"), "value": value},
                thread_id=str(thread) if thread else None,
                raw={k: v for k, v in payload.items() if k not in ("token", "response_url")},
            )
            updates.append(InboundUpdate(envelope=envelope))
        return InboundBatch(updates=updates)

    def _batch(self, payload: dict[str, Any]) -> InboundBatch:
        kind = payload.get("type")
        if kind == "url_verification":
            return InboundBatch(response={"challenge": str(payload.get("challenge") or "")})
        if kind != "event_callback":
            return InboundBatch()  # app rate-limit notices and the like: acknowledged
        event = payload.get("event")
        event_id = payload.get("event_id")
        if not isinstance(event, dict) or not isinstance(event_id, str) or not event_id:
            raise InboundRefusedError("malformed", "an event_callback without an event", status=400)
        other = self._event(payload, event)
        if other is not None:
            return InboundBatch(updates=[InboundUpdate(envelope=other)] if other else [])
        addressed = self._addressed(payload, event)
        if not addressed and not self._unaddressed_in_channel(payload, event):
            return InboundBatch()
        text = self._text(payload, event)
        files = self._files(event)
        if not text and not files:
            return InboundBatch()
        envelope = self._envelope(payload, event, text)
        envelope["data"]["mentioned"] = addressed
        return InboundBatch(updates=[InboundUpdate(envelope=envelope, files=files)])

    @staticmethod
    def _bot_user_id(payload: dict[str, Any]) -> str:
        for authorization in payload.get("authorizations") or ():
            if isinstance(authorization, dict) and authorization.get("is_bot") and authorization.get("user_id"):
                return str(authorization["user_id"])
        return ""

    def _event(self, payload: dict[str, Any], event: dict[str, Any]) -> dict[str, Any] | None:
        """The envelope of an event beyond messages (docs/platform-events.md); `{}` for one of those kinds
        that is not ours to deliver (the bot's own edits); None for a message or anything else."""
        kind = event.get("type")
        subtype = event.get("subtype")
        bot_user = self._bot_user_id(payload)
        event_id = f"slack:{self.bot_id}:{payload['event_id']}"
        raw = {k: v for k, v in payload.items() if k != "token"}
        event_time = float(payload.get("event_time") or time.time())
        common: dict[str, Any] = {"event_id": event_id, "source_event_type": str(subtype or kind), "raw": raw}
        if kind in ("member_joined_channel", "member_left_channel"):
            channel, user = str(event.get("channel") or ""), str(event.get("user") or "")
            if not channel or not user:
                return {}
            chat_type = _CHANNEL_TYPES.get(str(event.get("channel_type") or "C"), "channel")
            if kind == "member_joined_channel" and user == bot_user:
                inviter = str(event.get("inviter") or "") or None
                return platform_event_envelope(
                    event_type="bot.added", chat_id=channel, chat_type=chat_type, actor_id=inviter,
                    event_time=event_time, **common,
                )  # fmt: skip
            if user == bot_user:
                return {}  # the bot left: nothing to say to the channel
            inviter = str(event.get("inviter") or "")
            return platform_event_envelope(
                event_type="member.joined" if kind == "member_joined_channel" else "member.left",
                chat_id=channel, chat_type=chat_type, actor_id=user,
                extra={"operator_id": inviter} if inviter else None, event_time=event_time, **common,
            )  # fmt: skip
        if kind in ("reaction_added", "reaction_removed"):
            item = event.get("item") or {}
            user = str(event.get("user") or "")
            if item.get("type") != "message" or not item.get("channel") or not user or user == bot_user:
                return {}
            return platform_event_envelope(
                event_type="reaction.added" if kind == "reaction_added" else "reaction.removed",
                chat_id=str(item["channel"]), chat_type=_chat_type_of(str(item["channel"])), actor_id=user,
                target_message_id=str(item.get("ts") or "") or None, reaction=str(event.get("reaction") or ""),
                extra={"item_user": str(event["item_user"])} if event.get("item_user") else None,
                event_time=event_time, **common,
            )  # fmt: skip
        if kind == "message" and subtype == "message_changed":
            new = event.get("message") or {}
            user = str(new.get("user") or "")
            channel = str(event.get("channel") or "")
            if new.get("bot_id") or not user or user == bot_user or not channel:
                return {}
            previous = event.get("previous_message") or {}
            if previous.get("text") == new.get("text"):
                return {}  # an unfurl or a reply count changed, not the text
            text = self._text(payload, new)
            if not text:
                return {}
            in_channel = event.get("channel_type") != "im"
            thread = new.get("thread_ts") or (new.get("ts") if in_channel else None)
            mentioned = not in_channel or (bool(bot_user) and f"<@{bot_user}>" in str(new.get("text") or ""))
            return platform_event_envelope(
                event_type="message.edited", chat_id=channel, chat_type=str(event.get("channel_type") or "channel"),
                actor_id=user, target_message_id=str(new.get("ts") or "") or None, text=text,
                thread_id=str(thread) if thread else None, extra={"mentioned": mentioned},
                event_time=event_time, **common,
            )  # fmt: skip
        if kind == "message" and subtype == "message_deleted":
            previous = event.get("previous_message") or {}
            channel = str(event.get("channel") or "")
            if previous.get("bot_id") or previous.get("user") == bot_user or not channel:
                return {}
            return platform_event_envelope(
                event_type="message.recalled", chat_id=channel, chat_type=str(event.get("channel_type") or "channel"),
                actor_id=str(previous.get("user") or "") or None,
                target_message_id=str(event.get("deleted_ts") or previous.get("ts") or "") or None,
                event_time=event_time, **common,
            )  # fmt: skip
        return None

    def _thread_follow_up(self, payload: dict[str, Any], event: dict[str, Any]) -> bool:
        """A channel message in a thread the bot has written in, without a mention (a mention arrives as
        `app_mention` too), when the bot's `thread_follow_ups` credential is on."""
        if not credential_flag(self.credentials.get("thread_follow_ups")):
            return False
        thread, channel = event.get("thread_ts"), event.get("channel")
        if event.get("type") != "message" or not thread or event.get("channel_type") == "im":
            return False
        bot_user = self._bot_user_id(payload)
        if bot_user and f"<@{bot_user}>" in str(event.get("text") or ""):
            return False
        return bool(cache.get(thread_key(self.bot_id, str(channel), str(thread))))

    def _from_a_person(self, payload: dict[str, Any], event: dict[str, Any]) -> bool:
        if event.get("bot_id") or event.get("subtype") not in (None, *USER_SUBTYPES):
            return False  # bots (this one included), edits, deletions, joins
        user = event.get("user")
        return bool(user and user != self._bot_user_id(payload) and event.get("channel"))

    def _unaddressed_in_channel(self, payload: dict[str, Any], event: dict[str, Any]) -> bool:
        """A channel message (the message.channels / message.groups subscriptions) that does not mention the
        bot: forwarded with `data.mentioned: false`, for a binding with `group_always`. One that mentions it
        is left to its `app_mention` twin, and without the bot's user id a mention cannot be told apart."""
        bot_user = self._bot_user_id(payload)
        if event.get("type") != "message" or event.get("channel_type") in (None, "im") or not bot_user:
            return False
        return self._from_a_person(payload, event) and f"<@{bot_user}>" not in str(event.get("text") or "")

    def _addressed(self, payload: dict[str, Any], event: dict[str, Any]) -> bool:
        if not self._from_a_person(payload, event):
            return False
        if event.get("type") == "app_mention" or self._thread_follow_up(payload, event):
            return True
        # A plain message in a channel also arrives as an app_mention when it mentions the bot; answering
        # it here too would answer twice.
        return event.get("type") == "message" and event.get("channel_type") == "im"

    def _text(self, payload: dict[str, Any], event: dict[str, Any]) -> str:
        text = str(event.get("text") or "")
        bot_user = self._bot_user_id(payload)
        if bot_user:
            text = text.replace(f"<@{bot_user}>", "")
        return text.strip()

    @staticmethod
    def _files(event: dict[str, Any]) -> list[PlatformFileRef]:
        files: list[PlatformFileRef] = []
        for item in event.get("files") or ():
            if not isinstance(item, dict):
                continue
            url = item.get("url_private_download") or item.get("url_private")
            if not url:
                continue  # external files and tombstones carry nothing to fetch
            mime_type = str(item.get("mimetype") or "")
            size = item.get("size")
            files.append(
                PlatformFileRef(
                    ref={"file_id": str(item.get("id") or ""), "url": str(url)},
                    name=str(item.get("name") or item.get("title") or item.get("id") or "file"),
                    mime_type=mime_type,
                    size=size if isinstance(size, int) else None,
                    kind=_file_kind(mime_type),
                )
            )
        return files

    def _envelope(self, payload: dict[str, Any], event: dict[str, Any], text: str) -> dict[str, Any]:
        channel = str(event["channel"])
        in_channel = event.get("channel_type") != "im"
        thread = event.get("thread_ts") or (event.get("ts") if in_channel else None)
        target = ReplyTarget(chat_id=channel, thread_id=str(thread) if thread else None)
        ts = str(event.get("ts") or "")
        try:
            event_time: float = float(ts)
        except ValueError:
            event_time = float(payload.get("event_time") or time.time())
        return {
            "event_id": f"slack:{self.bot_id}:{payload['event_id']}",
            "event_type": "message.received",
            "source_event_type": str(event.get("type")),
            "thread_id": target.thread_id,
            "actor": {"actor_type": "user", "actor_id": str(event["user"]), "metadata": {}},
            "subject": {
                "subject_type": "message",
                "subject_id": ts,
                "data": {"channel_type": str(event.get("channel_type") or "channel"), "team": payload.get("team_id")},
            },
            "input": {"text": text or None},
            "data": {
                "chat_id": channel,
                "chat_type": str(event.get("channel_type") or "channel"),
                "reply_target": target.as_data(),
                # Without the app's legacy verification token: a secret has no place in the event log.
                "raw": {k: v for k, v in payload.items() if k != "token"},
            },
            "event_time": event_time,
        }

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        url = str(ref.ref.get("url") or "")
        if not url:
            raise PlatformAPIError("the file reference has no url")
        if not self._may_carry_token(url):
            raise PlatformAPIError(f"refusing to send the bot token to {urlsplit(url).hostname}")
        try:
            # The api_base_url override (a credential) may name any host: the outbound guard keeps the download
            # off the host's internal addresses unless an operator allowed them.
            async with httpx.AsyncClient(
                timeout=FILE_DOWNLOAD_TIMEOUT,
                follow_redirects=False,
                trust_env=False,
                transport=guarded_async_transport(allow_private=self.allow_private),
            ) as http:
                response = await http.get(url, headers={"Authorization": f"Bearer {self.bot_token}"})
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"the file's address is refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise PlatformAPIError(f"fetching a Slack file failed: {exc}", retryable=True) from exc
        if response.status_code == 429:
            raise PlatformAPIError("Slack rate-limited a file download", retry_after=_retry_after(response.headers))
        if response.status_code != 200 or response.headers.get("content-type", "").startswith("text/html"):
            # Without the files:read scope Slack answers its sign-in page instead of the file.
            raise PlatformAPIError(f"Slack did not give the file (HTTP {response.status_code}); is files:read granted?")
        return FetchedFile(data=response.content, name=ref.name, mime_type=ref.mime_type)

    def _may_carry_token(self, url: str) -> bool:
        """The bot token goes only to Slack's own hosts, or to the host `api_base_url` names."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if self.api_base_url and host == (urlsplit(self.api_base_url).hostname or "").lower():
            return True
        return parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com"))

    # -- outbound -------------------------------------------------------------------------------
    async def _call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """One Web API call by the SDK; Slack's errors (HTTP 200 with `ok: false`, or 429) as `PlatformAPIError`."""
        # The SDK's HTTP sessions take no transport: the override's address is checked before each call.
        await self.api_base_url_check()
        try:
            response = await getattr(self.client(), method)(**kwargs)
        except SlackApiError as exc:
            status = exc.response.status_code
            error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            message = f"Slack {method}: {error or f'HTTP {status}'}"
            if status == 429 or error == "ratelimited":
                raise PlatformAPIError(message, retry_after=_retry_after(exc.response.headers)) from exc
            # Slack documents that after `internal_error` or `fatal_error` "some aspect of the operation"
            # may have succeeded; a 5xx says nothing either way.
            failed_midway = status >= 500 or error in ("internal_error", "fatal_error")
            raise PlatformAPIError(message, retryable=failed_midway, outcome_unknown=failed_midway) from exc
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise transport_failure(f"Slack {method}: {exc}", exc) from exc
        data = response.data
        return data if isinstance(data, dict) else {}

    def plain_reply_target(self, target: ReplyTarget, message_id: str | None) -> ReplyTarget:
        # Slack's quote is a thread on the message: a plain reply goes to the channel, or stays in the
        # thread the message itself was written in.
        thread = target.thread_id if target.thread_id and target.thread_id != message_id else None
        return ReplyTarget(chat_id=target.chat_id, thread_id=thread, extra=target.extra)

    def mention_markup(self, actor: dict[str, Any]) -> str | None:
        user = str(actor.get("actor_id") or "")
        return f"<@{user}>" if _USER_ID.fullmatch(user) else None

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        sent = await self._call(
            "chat_postMessage",
            channel=target.chat_id,
            text=_escape(text),
            thread_ts=target.thread_id,
            unfurl_links=False,
        )
        if target.thread_id:
            await self._thread_mark(target)
        return SentMessage(chat_id=str(sent.get("channel") or target.chat_id), message_id=str(sent.get("ts")))

    async def _thread_mark(self, target: ReplyTarget) -> None:
        """Remember that the bot answered in this thread (for `thread_follow_ups`); a cache outage only
        loses follow-ups, never the reply."""
        if not credential_flag(self.credentials.get("thread_follow_ups")) or not target.thread_id:
            return
        with contextlib.suppress(Exception):
            await cache.aset(thread_key(self.bot_id, target.chat_id, target.thread_id), 1, THREAD_FOLLOW_SECONDS)

    async def edit_text(self, message: SentMessage, text: str) -> None:
        await self._call("chat_update", channel=message.chat_id, ts=message.message_id, text=_escape(text))

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        uploaded = await self._call(
            "files_upload_v2",
            channel=target.chat_id,
            thread_ts=target.thread_id,
            file=file.data,
            filename=file.name,
            title=file.name,
            initial_comment=file.caption or None,
        )
        files = uploaded.get("files") or [uploaded.get("file") or {}]
        first = files[0] if files and isinstance(files[0], dict) else {}
        return SentMessage(chat_id=target.chat_id, message_id=_shared_ts(first, target.chat_id) or str(first.get("id")))

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        try:
            await self._call(
                "reactions_add", channel=message.chat_id, timestamp=message.message_id, name=reaction.strip(":")
            )
        except PlatformAPIError as exc:
            if "already_reacted" not in str(exc):
                raise

    async def identity(self) -> str:
        me = await self._call("auth_test")
        return f"Slack knows this bot as {me.get('user') or '?'} in {me.get('team') or '?'} (auth.test)"

    async def webhook_register(self, url: str) -> str:
        """Slack takes the request URL only on the app's page; this checks the token and says what to paste."""
        me = await self._call("auth_test")
        return (
            f"{me.get('user') or 'the bot'} in {me.get('team') or 'the workspace'}: paste {url} as the Request URL "
            "under Event Subscriptions on the Slack app's page and subscribe to message.im and app_mention "
            "(and message.channels / message.groups for bindings that answer every group message)"
        )

    async def aclose(self) -> None:
        self._client = None  # the SDK opens and closes an HTTP session per call


_USER_ID = re.compile(r"[UW][A-Z0-9]{2,20}")
_LEADING_MENTION = re.compile(r"<@[UW][A-Z0-9]{2,20}> ")


def _escape(text: str) -> str:
    """Slack reads `<...>` in a message as a link or mention and `&` as an entity: the three are escaped
    (and nothing else), as its message formatting guide asks — all but the one user mention a reply may
    start with (`mention_markup`, for the binding's `group_reply: mention`)."""
    lead = _LEADING_MENTION.match(text)
    head = lead.group(0) if lead else ""
    return head + text[len(head) :].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _retry_after(headers: Any) -> float:
    try:
        return max(0.0, float(headers.get("Retry-After") or headers.get("retry-after") or 1))
    except (TypeError, ValueError):
        return 1.0


def _shared_ts(file: dict[str, Any], channel: str) -> str | None:
    """The ts of the message that shares an uploaded file in `channel`, when Slack says it already."""
    shares = file.get("shares")
    if not isinstance(shares, dict):
        return None
    for scope in ("public", "private"):
        posts = (shares.get(scope) or {}).get(channel)
        if isinstance(posts, list) and posts and isinstance(posts[0], dict) and posts[0].get("ts"):
            return str(posts[0]["ts"])
    return None
