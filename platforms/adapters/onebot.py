"""QQ through OneBot v11 (NapCat, Lagrange.OneBot, go-cqhttp and the like), in either of OneBot's two ways:

- reverse WebSocket: the implementation connects to the host's `/platforms/onebot/<workspace slug>/<bot_id>/ws`
  (`platforms.consumers`), pushes its events there, and takes the bot's API calls (`send_msg`, ...) back
  over the same socket, each answered by a response carrying the call's `echo`;
- HTTP: the implementation posts each event to the bot's webhook (`/platforms/qq/<workspace slug>/<bot_id>/
  webhook`, OneBot's "HTTP POST" reporting), signed in `X-Signature: sha1=<hex>` (HMAC-SHA1 of the raw body
  with the secret), and the host calls the implementation's HTTP API (`POST <api_base_url>/send_msg`, with
  `Authorization: Bearer <access_token>`). Set `api_base_url` and the replies take this way.

Credentials: `access_token` (required; OneBot sends it as `Authorization: Bearer <token>`, or as the
`access_token` query parameter, and takes it on its HTTP API), `secret` (optional: OneBot's HTTP POST
`secret`; once set, a posted event must carry its `X-Signature`; without it an `X-Signature` is checked
with the access token, as NapCat signs with its one token), `api_base_url` (optional: the implementation's
HTTP API, e.g. `http://127.0.0.1:3000`). The bot's `platform` is `qq`.

Private messages are answered; in groups, the messages that @ the bot (answered as a reply to them); the
other group messages are forwarded with `data.mentioned: false`, for a binding with `group_always`.
Notices of members joining and leaving, the bot joining a group, recalls and NapCat's emoji reactions are
events of their own (docs/platform-events.md).
Segments read: text, at, image (fetched lazily from its `url`), reply; others are left out of the text.
OneBot cannot edit a sent message, so replies are sent once, whole (the host's delivery does not stream to
platforms without edits).

The outbound side runs wherever the run's delivery runs (a Celery worker) while the socket is held by a web
process: calls travel over the channel layer to the consumer holding the bot's socket, which the cache
names (`onebot_channel_key`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
import uuid
from typing import Any, ClassVar

import httpx
from channels.layers import get_channel_layer
from django.core.cache import cache

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

CALL_TIMEOUT_SECONDS = 30.0
FILE_DOWNLOAD_TIMEOUT = 60.0
CALL_MESSAGE_TYPE = "onebot.call"
RESULT_MESSAGE_TYPE = "onebot.result"


def onebot_channel_key(bot_id: str, access_token: str) -> str:
    """The cache key naming the channel of the consumer that holds a bot's socket: the bot's id and its
    secret token (an adapter knows no more of its bot), hashed."""
    digest = hashlib.sha256(f"{bot_id}\0{access_token}".encode()).hexdigest()[:32]
    return f"platforms:onebot:channel:{digest}"


def _segments(message: Any) -> list[dict[str, Any]]:
    if isinstance(message, str):  # the CQ-code string format: its text as it stands
        return [{"type": "text", "data": {"text": message}}]
    if isinstance(message, list):
        return [s for s in message if isinstance(s, dict) and isinstance(s.get("data"), dict)]
    return []


def _image_name(data: dict[str, Any]) -> str:
    name = str(data.get("file") or data.get("file_unique") or "image")
    name = name.rsplit("/", 1)[-1].split("?", 1)[0] or "image"
    return name if "." in name else f"{name}.jpg"


class OneBotAdapter(PlatformAdapter):
    platform: ClassVar[str] = "qq"
    # QQ takes about 4,500 characters in one message (NapCat's documented limit is lower for rich text);
    # replies are sent whole, not streamed, so the pace only spaces the pieces of a split reply.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=False,
        reaction=False,
        files_in=True,
        files_out=True,
        threads=False,
        max_message_chars=4000,
        edit_interval_seconds=1.0,
        max_file_bytes=30 * 1024 * 1024,
        event_types=(
            "member.joined",
            "member.left",
            "reaction.added",
            "reaction.removed",
            "message.recalled",
            "bot.added",
        ),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("access_token", "secret", "api_base_url")
    connection_kinds: ClassVar[tuple[str, ...]] = ("reverse WebSocket", "webhook (HTTP POST)")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "access_token",
            required=True,
            secret=True,
            help="A token you choose and set as the access token in your OneBot v11 implementation "
            "(NapCat, Lagrange, go-cqhttp): it sends it with every event.",
            link="https://github.com/botuniverse/onebot-11",
        ),
        CredentialField(
            "secret",
            secret=True,
            help="HTTP mode only: the secret set for HTTP POST reporting in your OneBot implementation; "
            "every posted event must then carry its X-Signature (HMAC-SHA1 of the body).",
        ),
        CredentialField(
            "api_base_url",
            help="HTTP mode only: the implementation's HTTP API (e.g. http://127.0.0.1:3000); replies go there "
            "instead of over the reverse WebSocket.",
        ),
    )

    _http: httpx.AsyncClient | None = None

    @property
    def access_token(self) -> str:
        return str(self.credentials.get("access_token") or "")

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        """A posted event by its `X-Signature` (required once `secret` is set); else the token as OneBot v11
        sends it: `Authorization: Bearer <token>` (or `Token <token>`), else the `access_token` query
        parameter (the reverse WebSocket's handshake, whose body is empty, is always checked so)."""
        if not self.access_token:
            raise InboundRefusedError("forged", "the bot has no access_token; set the same one in OneBot", status=403)
        secret = str(self.credentials.get("secret") or "")
        signature = request.header("x-signature")
        if request.body and (secret or signature):
            expected = hmac.new((secret or self.access_token).encode(), request.body, hashlib.sha1).hexdigest()
            if not signature:
                raise InboundRefusedError("forged", "the event carries no X-Signature", status=401)
            if not hmac.compare_digest(signature.strip().lower().encode(), f"sha1={expected}".encode()):
                raise InboundRefusedError("forged", "the X-Signature does not match", status=403)
            return
        header = request.header("authorization")
        scheme, _, given = header.partition(" ")
        if not (header and scheme.lower() in ("bearer", "token")):
            given = request.query.get("access_token", "")
        if not given:
            raise InboundRefusedError("forged", "no access token", status=401)
        if not hmac.compare_digest(given.strip().encode(), self.access_token.encode()):
            raise InboundRefusedError("forged", "the access token does not match", status=403)

    def parse(self, request: InboundRequest) -> InboundBatch:
        event = inbound_json_object(request.body, what="not a OneBot event")
        with malformed_unless_shaped("not a OneBot event"):
            update = self.event_update(event)
        return InboundBatch(updates=[update] if update else [])

    def event_update(self, event: dict[str, Any]) -> InboundUpdate | None:
        """The update of a OneBot message event, or None for other events and messages not for the bot."""
        if event.get("post_type") == "notice":
            envelope = self._notice(event)
            return InboundUpdate(envelope=envelope) if envelope else None
        if event.get("post_type") != "message" or event.get("message_type") not in ("private", "group"):
            return None
        self_id = str(event.get("self_id") or "")
        user_id = str(event.get("user_id") or "")
        if not user_id or user_id == self_id:
            return None
        group = event.get("message_type") == "group"
        segments = _segments(event.get("message"))
        mentioned = any(s.get("type") == "at" and str(s["data"].get("qq")) == self_id for s in segments)
        # Every group message arrives; one that does not @ the bot is forwarded with `data.mentioned: false`,
        # for the binding's trigger policy (`group_always`).
        addressed = not group or (mentioned and bool(self_id))
        text_parts: list[str] = []
        files: list[PlatformFileRef] = []
        quoted = ""
        for segment in segments:
            kind, data = segment.get("type"), segment["data"]
            if kind == "text":
                text_parts.append(str(data.get("text") or ""))
            elif kind == "at" and str(data.get("qq")) != self_id:
                text_parts.append(f"@{data.get('name') or data.get('qq')}")
            elif kind == "image" and data.get("url"):
                files.append(
                    PlatformFileRef(
                        ref={"url": str(data["url"]), "file": str(data.get("file") or "")},
                        name=_image_name(data),
                        mime_type="image/jpeg" if not str(data.get("file") or "").endswith(".png") else "image/png",
                        size=int(data["file_size"]) if str(data.get("file_size") or "").isdigit() else None,
                        kind="image",
                    )
                )
            elif kind == "reply":
                quoted = str(data.get("id") or "")
        text = "".join(text_parts).strip()
        if not text and not files:
            return None
        chat_id = f"group:{event.get('group_id')}" if group else f"private:{user_id}"
        message_id = str(event.get("message_id") or "")
        target = ReplyTarget(chat_id=chat_id, reply_to_message_id=message_id if group and message_id else None)
        sender = event.get("sender")
        sender = sender if isinstance(sender, dict) else {}
        return InboundUpdate(
            envelope={
                "event_id": f"onebot:{self.bot_id}:{self_id}:{message_id}:{event.get('time')}",
                "event_type": "message.received",
                "source_event_type": f"message.{event.get('message_type')}",
                "actor": {
                    "actor_type": "user",
                    "actor_id": user_id,
                    "metadata": {"nickname": str(sender.get("card") or sender.get("nickname") or "")},
                },
                "subject": {
                    "subject_type": "message",
                    "subject_id": message_id,
                    "data": {"self_id": self_id, "quoted_message_id": quoted or None},
                },
                "input": {"text": text or None},
                "data": {
                    "chat_id": chat_id,
                    "chat_type": "group" if group else "private",
                    "reply_target": target.as_data(),
                    "mentioned": addressed,
                    "raw": event,
                },
                "event_time": float(event.get("time") or time.time()),
            },
            files=files,
        )

    def _notice(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """A notice that is an event beyond messages (docs/platform-events.md): group_increase /
        group_decrease (the bot itself joining is `bot.added`), group_recall / friend_recall, and NapCat's
        group_msg_emoji_like. OneBot names no delivery, so the event id is made of what the notice says
        (redelivered, it says the same)."""
        kind = str(event.get("notice_type") or "")
        self_id = str(event.get("self_id") or "")
        user = str(event.get("user_id") or "")
        group = str(event.get("group_id") or "")
        operator = str(event.get("operator_id") or "")
        message_id = str(event.get("message_id") or "")
        chat_id, chat_type = (f"group:{group}", "group") if group else (f"private:{user}", "private")
        event_id = ":".join(
            ("onebot", self.bot_id, self_id, kind, str(event.get("sub_type") or ""), group, user, message_id,
             str(event.get("time") or ""))
        )  # fmt: skip
        common: dict[str, Any] = {
            "source_event_type": f"notice.{kind}",
            "raw": event,
            "event_time": float(event.get("time") or time.time()),
        }
        if not user or (not group and kind != "friend_recall"):
            return None
        if kind == "group_increase":
            if user == self_id:
                return platform_event_envelope(
                    event_id=event_id, event_type="bot.added", chat_id=chat_id, chat_type=chat_type,
                    actor_id=operator or None, **common,
                )  # fmt: skip
            return platform_event_envelope(
                event_id=event_id, event_type="member.joined", chat_id=chat_id, chat_type=chat_type, actor_id=user,
                extra={"operator_id": operator} if operator and operator != user else None, **common,
            )  # fmt: skip
        if kind == "group_decrease":
            if user == self_id or event.get("sub_type") == "kick_me":
                return None  # the bot was removed: nothing to say to a group it is no longer in
            return platform_event_envelope(
                event_id=event_id, event_type="member.left", chat_id=chat_id, chat_type=chat_type, actor_id=user,
                extra={"operator_id": operator, "how": str(event.get("sub_type") or "")} if operator else None,
                **common,
            )  # fmt: skip
        if kind in ("group_recall", "friend_recall"):
            if user == self_id:
                return None
            return platform_event_envelope(
                event_id=event_id, event_type="message.recalled", chat_id=chat_id, chat_type=chat_type,
                actor_id=operator or user, target_message_id=message_id or None,
                extra={"author_id": user}, **common,
            )  # fmt: skip
        if kind == "group_msg_emoji_like":
            if user == self_id or not message_id:
                return None
            likes = [str(like.get("emoji_id")) for like in event.get("likes") or () if isinstance(like, dict)]
            # NapCat says `is_add: false` for a reaction taken back; older versions only report additions.
            added = event.get("is_add") is not False
            return platform_event_envelope(
                event_id=event_id, event_type="reaction.added" if added else "reaction.removed", chat_id=chat_id,
                chat_type=chat_type, actor_id=user, target_message_id=message_id, reaction=",".join(likes),
                **common,
            )  # fmt: skip
        return None

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        url = str(ref.ref.get("url") or "")
        if not url.startswith(("http://", "https://")):
            raise PlatformAPIError("the image has no URL to fetch it from")
        # The URL comes from the event, which whoever holds the bot's token can write: the outbound guard keeps
        # it off the host's internal addresses (unless an operator allowed them for the workspace).
        try:
            async with httpx.AsyncClient(
                timeout=FILE_DOWNLOAD_TIMEOUT,
                follow_redirects=True,
                trust_env=False,
                transport=guarded_async_transport(allow_private=self.allow_private),
            ) as http:
                response = await http.get(url)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"the image's address is refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise PlatformAPIError(f"fetching a QQ image failed: {exc}", retryable=True) from exc
        if response.status_code != 200:
            raise PlatformAPIError(f"QQ did not give the image (HTTP {response.status_code})")
        return FetchedFile(data=response.content, name=ref.name, mime_type=ref.mime_type)

    # -- outbound -------------------------------------------------------------------------------
    async def call(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        """One OneBot API call, over the implementation's HTTP API when the bot has `api_base_url`, else
        over its socket; the response's `data`."""
        if self.api_base_url:
            return _response_data(action, await self._http_call(action, params))
        channel = await cache.aget(onebot_channel_key(self.bot_id, self.access_token))
        if not channel:
            raise PlatformAPIError("no OneBot implementation is connected for this bot", retryable=True)
        layer = get_channel_layer()
        assert layer is not None
        reply = await layer.new_channel()
        echo = uuid.uuid4().hex
        await layer.send(
            str(channel),
            {"type": CALL_MESSAGE_TYPE, "action": action, "params": params, "echo": echo, "reply_to": reply},
        )
        # From here on the call may reach the implementation, which sends the message before it answers:
        # without an answer the outcome is unknown, unless the consumer says it never sent the frame.
        try:
            async with asyncio.timeout(CALL_TIMEOUT_SECONDS):
                answer = await layer.receive(reply)
        except TimeoutError:
            raise PlatformAPIError(f"OneBot {action}: no response", retryable=True, outcome_unknown=True) from None
        answer = answer if isinstance(answer, dict) else {}
        response = answer.get("response")
        if not isinstance(response, dict):
            raise PlatformAPIError(
                f"OneBot {action}: {answer.get('error') or 'no response'}",
                retryable=True,
                outcome_unknown=not answer.get("not_sent"),
            )
        return _response_data(action, response)

    async def _http_call(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        """`POST <api_base_url>/<action>` with the params as JSON (OneBot v11's HTTP API)."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                headers={"Authorization": f"Bearer {self.access_token}"},
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=CALL_TIMEOUT_SECONDS,
                follow_redirects=False,
            )
        try:
            response = await self._http.post(f"{self.api_base_url}/{action}", json=params)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"OneBot {action}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise transport_failure(f"OneBot {action}: {exc}", exc) from exc
        # 401/403: the access token is missing or wrong; 404: no such action; 400/406: not a call it reads.
        if response.status_code >= 400:
            why = {401: " (no access token)", 403: " (the access token is refused)", 404: " (no such action)"}
            raise PlatformAPIError(
                f"OneBot {action}: HTTP {response.status_code}{why.get(response.status_code, '')}",
                retryable=response.status_code >= 500,
                outcome_unknown=response.status_code >= 500,
            )
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise PlatformAPIError(f"OneBot {action}: not a OneBot response", outcome_unknown=True)
        return body

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def _send(self, target: ReplyTarget, segments: list[dict[str, Any]]) -> SentMessage:
        kind, _, peer = target.chat_id.partition(":")
        if kind not in ("group", "private") or not peer.isdigit():
            raise PlatformAPIError(f"not a OneBot chat: {target.chat_id!r} (group:<id> or private:<id>)")
        if target.reply_to_message_id:
            segments = [{"type": "reply", "data": {"id": target.reply_to_message_id}}, *segments]
        params: dict[str, Any] = {"message_type": kind, "message": segments}
        params["group_id" if kind == "group" else "user_id"] = int(peer)
        sent = await self.call("send_msg", params)
        return SentMessage(chat_id=target.chat_id, message_id=str(sent.get("message_id") or ""))

    def mention_markup(self, actor: dict[str, Any]) -> str | None:
        user = str(actor.get("actor_id") or "")
        return f"[CQ:at,qq={user}]" if user.isdigit() else None

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        segments: list[dict[str, Any]] = [{"type": "text", "data": {"text": text}}]
        # A reply that starts with `mention_markup` starts with an `at` segment (text segments are literal).
        qq, sep, rest = text.removeprefix("[CQ:at,qq=").partition("] ")
        if text.startswith("[CQ:at,qq=") and sep and qq.isdigit():
            segments = [{"type": "at", "data": {"qq": qq}}, {"type": "text", "data": {"text": f" {rest}"}}]
        return await self._send(target, segments)

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        encoded = f"base64://{base64.b64encode(file.data).decode()}"
        if file.mime_type.startswith("image/"):
            segment = {"type": "image", "data": {"file": encoded}}
        else:
            # Not in OneBot v11 itself; NapCat and Lagrange take a `file` segment.
            segment = {"type": "file", "data": {"file": encoded, "name": file.name}}
        segments = [segment]
        if file.caption:
            segments.append({"type": "text", "data": {"text": file.caption}})
        return await self._send(target, segments)


def _response_data(action: str, response: dict[str, Any]) -> dict[str, Any]:
    """A OneBot response's `data`, or the failure it reports (`status: failed`, a retcode not 0 or 1)."""
    if response.get("status") == "failed" or response.get("retcode") not in (0, 1, None):
        message = response.get("wording") or response.get("message") or response.get("msg") or ""
        raise PlatformAPIError(f"OneBot {action}: retcode {response.get('retcode')} {message}".strip())
    data = response.get("data")
    return data if isinstance(data, dict) else {}
