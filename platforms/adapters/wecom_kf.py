"""WeChat Customer Service (微信客服) through a WeCom corp, on httpx: WeChat users (not only the corp's
members) write to a customer-service account; the corp's callback URL is told only that something
arrived — the sealed XML event `kf_msg_or_event` with a short-lived `Token` and the account's `OpenKfId`,
encrypted and signed as every WeCom callback (`wecom.WeComAdapter`'s check, receive id the corp id) — and
the messages are then pulled with `POST /cgi-bin/kf/sync_msg` (the event's token, the account, and the
cursor where the last pull stopped). Replies go out with `POST /cgi-bin/kf/send_msg` (text; pictures and
files uploaded with `media/upload` first), on an access token bought with the corp id and the customer
service's Secret and cached as for WeCom apps (`wechat_api`). Pictures, voice, video and files in are
fetched with `media/get`.

The cursor is kept per bot and account in `platforms.models.PlatformCursor` (`kf_sync:<open_kfid>`), and
saved only once the pulled messages have been accepted (the webhook's `reply_wait` hook runs after
that): a crash in between pulls them again, and their `msgid`s make each one event once.

Events: `enter_session` (a customer opening the chat, from a QR code or link) becomes `member.joined`,
with its `welcome_code`, so a binding may greet: a reply to it is sent with `send_msg_on_event` (WeCom
takes a greeting only that way, within 20 s, once). `user_recall_msg` becomes `message.recalled`. Messages
written by the corp's human agents (`origin` 5) and other system events are not handed on.

Credentials: `corp_id` (My Company → Company Information), `kf_secret` (WeChat Customer Service → API →
the Secret, or an internal app's Secret granted customer-service access there), `token` and
`encoding_aes_key` (the same API page's callback settings), optional `open_kfid` (only this account's
messages; otherwise every account the secret may read), optional `api_base_url`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, ClassVar

from asgiref.sync import async_to_sync

from bindings.models import Bot
from platforms.adapters.wechat_crypto import xml_text as _field
from platforms.adapters.wecom import WeComAdapter
from platforms.adapters.wecom import _disposition_name as disposition_name
from platforms.interface import (
    CredentialField,
    FetchedFile,
    InboundBatch,
    InboundRefusedError,
    InboundRequest,
    InboundUpdate,
    PlatformAPIError,
    PlatformCapabilities,
    PlatformFileRef,
    ReplyTarget,
    SentMessage,
)
from platforms.models import PlatformCursor

logger = logging.getLogger(__name__)

# One pull takes at most 1,000 messages; a burst beyond these pages waits for the next callback.
SYNC_LIMIT = 1000
MAX_PAGES = 5
CUSTOMER = 3
SYSTEM_EVENT = 4
MEDIA_KINDS = {"image": "image", "voice": "audio", "video": "video", "file": "file"}
MEDIA_NAMES = {"image": "image.jpg", "voice": "voice.amr", "video": "video.mp4", "file": "file"}
IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})
WRONG_SHAPE = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError)
# errcode 95018: the customer's session is not in a state the API may write to (taken by a human, ended).
SESSION_CLOSED = 95018


class WeComKfAdapter(WeComAdapter):
    platform: ClassVar[str] = "wecom_kf"
    # A text message may carry 2,048 bytes. WeCom lets the API send five messages to a customer after each
    # of theirs, within 48 hours: a long reply is best kept short; one write every 2 s.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=False,
        reaction=False,
        files_in=True,
        files_out=True,
        threads=False,
        max_message_chars=2048,
        edit_interval_seconds=2.0,
        max_file_bytes=20 * 1024 * 1024,
        event_types=("member.joined", "message.recalled"),
        groups=False,
    )
    credential_keys: ClassVar[tuple[str, ...]] = (
        "corp_id",
        "kf_secret",
        "token",
        "encoding_aes_key",
        "open_kfid",
        "api_base_url",
    )
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "corp_id",
            required=True,
            help="The company's CorpID: WeCom admin console → My Company → Company Information → Company ID.",
            link="https://work.weixin.qq.com/wework_admin/frame#profile",
        ),
        CredentialField(
            "kf_secret",
            required=True,
            secret=True,
            help="The customer service API's Secret: admin console → WeChat Customer Service → API (or the "
            "Secret of an internal app given customer-service access on that page).",
            link="https://work.weixin.qq.com/wework_admin/frame#/app/servicer",
        ),
        CredentialField(
            "token",
            required=True,
            secret=True,
            help="The callback Token, on the same API page (its callback settings).",
            link="https://work.weixin.qq.com/wework_admin/frame#/app/servicer",
        ),
        CredentialField(
            "encoding_aes_key",
            required=True,
            secret=True,
            help="The callback EncodingAESKey (43 characters), on the same page.",
            link="https://work.weixin.qq.com/wework_admin/frame#/app/servicer",
        ),
        CredentialField(
            "open_kfid",
            help="Optional: one customer-service account's id (wk...); without it, every account the "
            "Secret may read is answered.",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: the API's origin (default https://qyapi.weixin.qq.com), for a proxy.",
        ),
    )
    api_label: ClassVar[str] = "WeChat Customer Service"
    app_secret_key: ClassVar[str] = "kf_secret"

    def token_params(self) -> dict[str, str]:
        return {"corpid": self._secret("corp_id"), "corpsecret": self._secret("kf_secret")}

    # -- inbound --------------------------------------------------------------------------------
    def parse(self, request: InboundRequest) -> InboundBatch:
        message = self._message(request)
        if request.method == "GET":
            return InboundBatch(text_response=message.text or "")
        if _field(message, "MsgType") != "event" or _field(message, "Event") != "kf_msg_or_event":
            return InboundBatch(text_response="")
        account = _field(message, "OpenKfId")
        wanted = self._secret("open_kfid")
        if wanted and account and account != wanted:
            return InboundBatch(text_response="")  # another account of the corp: not this bot's
        return self._pull(_field(message, "Token"), wanted or account)

    def _bot(self) -> Bot | None:
        """The bot this adapter serves (its cursor's owner): bot ids are unique per workspace, so the one
        whose credentials are these."""
        for bot in Bot.objects.filter(bot_id=self.bot_id, platform=self.platform):
            held = bot.credentials or {}
            if all(str(held.get(k) or "").strip() == self._secret(k) for k in ("corp_id", "token", "encoding_aes_key")):
                return bot
        return None

    def _pull(self, token: str, account: str) -> InboundBatch:
        bot = self._bot()
        if bot is None:
            raise InboundRefusedError("forged", "no bot holds these credentials", status=401)
        name = f"kf_sync:{account or '*'}"[:64]
        cursor = PlatformCursor.objects.filter(bot=bot, name=name).values_list("value", flat=True).first() or ""
        try:
            messages, next_cursor = async_to_sync(self._sync)(token, account, cursor)
        except PlatformAPIError as exc:
            # The messages wait on WeCom's side: the next event's pull starts from the same cursor.
            logger.warning("wecom_kf bot %s: sync_msg failed: %s", self.bot_id, exc)
            return InboundBatch(text_response="")
        updates: list[InboundUpdate] = []
        for item in messages:
            try:
                update = self._kf_update(item)
            except WRONG_SHAPE as exc:
                # One item of a shape WeCom does not document is skipped: refusing the whole pull would
                # keep the cursor where it is, and every later pull would stop at the same item.
                logger.warning("wecom_kf bot %s: skipped a sync_msg item (%s)", self.bot_id, type(exc).__name__)
                continue
            if update is not None:
                updates.append(update)

        def keep_cursor(_started: bool) -> tuple[str, str]:
            if next_cursor and next_cursor != cursor:
                PlatformCursor.objects.update_or_create(bot=bot, name=name, defaults={"value": next_cursor})
            return "", "text/plain; charset=utf-8"

        return InboundBatch(updates=updates, reply_wait=keep_cursor)

    async def _sync(self, token: str, account: str, cursor: str) -> tuple[list[dict[str, Any]], str]:
        """Every message since `cursor` (up to `MAX_PAGES` pages), and the cursor after them."""
        found: list[dict[str, Any]] = []
        try:
            for _ in range(MAX_PAGES):
                body: dict[str, Any] = {"cursor": cursor, "token": token, "limit": SYNC_LIMIT}
                if account:
                    body["open_kfid"] = account
                response = await self.call("kf.sync_msg", "POST", "/cgi-bin/kf/sync_msg", json=body)
                answer = self.json_object(response)
                found += [m for m in answer.get("msg_list") or [] if isinstance(m, dict)]
                cursor = str(answer.get("next_cursor") or cursor)
                if not answer.get("has_more"):
                    break
        finally:
            # The adapter was made for this request, on the loop `async_to_sync` made for this call.
            await self.aclose()
        return found, cursor

    def _kf_update(self, item: dict[str, Any]) -> InboundUpdate | None:
        kind = str(item.get("msgtype") or "")
        origin = int(item.get("origin") or 0)
        if kind == "event":
            event = item.get("event")
            return self._event(event, item) if isinstance(event, dict) else None
        if origin != CUSTOMER:
            return None  # the corp's human agents, or system messages
        msgid = str(item.get("msgid") or "")
        customer = str(item.get("external_userid") or "")
        account = str(item.get("open_kfid") or "")
        if not msgid or not customer or not account:
            return None
        files: list[PlatformFileRef] = []
        text = ""
        given = item.get(kind)
        content: dict[str, Any] = given if isinstance(given, dict) else {}
        if kind == "text":
            given_text = content.get("content")
            text = given_text.strip() if isinstance(given_text, str) else ""
        elif kind in MEDIA_KINDS and content.get("media_id"):
            files.append(
                PlatformFileRef(
                    ref={"media_id": str(content["media_id"])}, name=MEDIA_NAMES[kind], kind=MEDIA_KINDS[kind]
                )
            )
        elif kind == "location":
            text = " ".join(str(content.get(k) or "") for k in ("name", "address")).strip()
        elif kind == "link":
            text = "\n".join(str(content.get(k) or "") for k in ("title", "url") if content.get(k))
        if not text and not files:
            return None
        target = ReplyTarget(chat_id=customer, extra={"open_kfid": account})
        return InboundUpdate(
            envelope=self._kf_envelope(
                event_id=f"wecom_kf:{self.bot_id}:{msgid}",
                event_type="message.received",
                source=kind,
                customer=customer,
                subject={"subject_type": "message", "subject_id": msgid, "data": {"chat_type": "private"}},
                text=text,
                target=target,
                raw=item,
            ),
            files=files,
        )

    def _event(self, event: dict[str, Any], item: dict[str, Any]) -> InboundUpdate | None:
        kind = str(event.get("event_type") or "")
        customer = str(event.get("external_userid") or "")
        account = str(event.get("open_kfid") or "")
        if not customer or not account:
            return None
        if kind == "enter_session":
            extra: dict[str, Any] = {"open_kfid": account}
            if event.get("welcome_code"):
                extra["welcome_code"] = str(event["welcome_code"])
            stamp = str(item.get("send_time") or event.get("welcome_code") or time.time_ns())
            return InboundUpdate(
                envelope=self._kf_envelope(
                    event_id=f"wecom_kf:{self.bot_id}:enter:{account}:{customer}:{stamp}",
                    event_type="member.joined",
                    source="enter_session",
                    customer=customer,
                    subject={"subject_type": "member", "subject_id": customer, "data": {"chat_type": "private"}},
                    text="",
                    target=ReplyTarget(chat_id=customer, extra=extra),
                    raw={k: v for k, v in event.items() if k != "welcome_code"} | {"scene": event.get("scene")},
                )
            )
        if kind == "user_recall_msg" and event.get("recall_msgid"):
            recalled = str(event["recall_msgid"])
            return InboundUpdate(
                envelope=self._kf_envelope(
                    event_id=f"wecom_kf:{self.bot_id}:recall:{recalled}",
                    event_type="message.recalled",
                    source="user_recall_msg",
                    customer=customer,
                    subject={"subject_type": "message", "subject_id": recalled, "data": {"chat_type": "private"}},
                    text="",
                    target=ReplyTarget(chat_id=customer, extra={"open_kfid": account}),
                    raw=event,
                )
            )
        return None

    def _kf_envelope(
        self,
        *,
        event_id: str,
        event_type: str,
        source: str,
        customer: str,
        subject: dict[str, Any],
        text: str,
        target: ReplyTarget,
        raw: dict[str, Any],
    ) -> dict[str, Any]:
        sent_at = raw.get("send_time")
        return {
            "event_id": event_id,
            "event_type": event_type,
            "source_event_type": source,
            "actor": {"actor_type": "user", "actor_id": customer, "actor_name": customer[:255]},
            "subject": subject,
            "input": {"text": text or None},
            "data": {
                "chat_id": customer,
                "chat_type": "private",
                "open_kfid": target.extra.get("open_kfid"),
                **({"target_message_id": subject["subject_id"]} if event_type == "message.recalled" else {}),
                "reply_target": target.as_data(),
                "raw": raw,
            },
            **({"event_time": float(sent_at)} if isinstance(sent_at, int | float) and sent_at > 0 else {}),
        }

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        media_id = str(ref.ref.get("media_id") or "")
        if not media_id:
            raise PlatformAPIError("the file reference has no media_id")
        response = await self.call("media.get", "GET", "/cgi-bin/media/get", params={"media_id": media_id})
        name = disposition_name(response.headers.get("content-disposition", "")) or ref.name
        mime_type = ref.mime_type or response.headers.get("content-type", "").split(";")[0].strip()
        return FetchedFile(data=response.content, name=name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    async def _message_send(self, target: ReplyTarget, msgtype: str, content: dict[str, Any]) -> SentMessage:
        # Text and files are sent as the app sends them (WeComAdapter.send_text / send_file), through kf/send_msg.
        account = str(target.extra.get("open_kfid") or self._secret("open_kfid"))
        if not account:
            raise PlatformAPIError("WeChat Customer Service: the reply names no customer-service account")
        welcome = str(target.extra.get("welcome_code") or "")
        if welcome:
            # A greeting on `enter_session`: only through its welcome code.
            body: dict[str, Any] = {"code": welcome, "msgtype": msgtype, msgtype: content}
            path, what = "/cgi-bin/kf/send_msg_on_event", "kf.send_msg_on_event"
        else:
            body = {"touser": target.chat_id, "open_kfid": account, "msgtype": msgtype, msgtype: content}
            path, what = "/cgi-bin/kf/send_msg", "kf.send_msg"
        response = await self.call(what, "POST", path, json=body)
        answer = self.json_object(response)
        return SentMessage(chat_id=target.chat_id, message_id=str(answer.get("msgid") or ""))

    async def identity(self) -> str:
        await self.access_token()
        return f"WeCom issued an access token for WeChat Customer Service to corp {self._secret('corp_id')}"

    async def webhook_register(self, url: str) -> str:
        await self.access_token()
        return (
            f"paste {url} as the callback URL under WeChat Customer Service → API, with the bot's Token and "
            "EncodingAESKey, and add this server's address to the trusted IPs"
        )
