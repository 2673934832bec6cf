"""Lark / Feishu on lark-oapi: event subscription v2 in (`im.message.receive_v1`; the verification token,
the encrypted body (decrypted with `cryptography`, see `_decrypt`) and its signature checked as the
platform defines them; the URL verification challenge
answered), replies out as interactive message cards that streaming updates in place
(`PATCH im/v1/messages/{message_id}`), images and files both ways.

Credentials: `app_id`, `app_secret` (the app's; they buy the tenant_access_token, cached per app until
shortly before it expires), `verification_token` and/or `encrypt_key` (from the app's "Events and
callbacks" page; at least one is required), optional `api_base_url` (the Open Platform's origin:
`https://open.feishu.cn` for Feishu, the default, `https://open.larksuite.com` for Lark, or a proxy) and
`bot_open_id` (the bot's open_id, for mentions in groups; "Set the platform webhook" in admin fills it from
`bot/v3/info`).

In one-to-one chats the bot answers everything; in groups a message that mentions it, and it answers as a
reply to that message (in its topic thread when the message is in one). Other group messages (pushed with
the "read all group messages" permission) are forwarded with `data.mentioned: false`, for a binding with
`group_always`; set `bot_open_id` then, or any @-mention counts as one of the bot. Member, bot-added, reaction and
recall events and card callbacks (`card.action.trigger`, answered at once with the optional `card_toast`)
are events of their own (docs/platform-events.md).

The SDK is imported on first use: importing lark-oapi takes seconds, and most processes never need it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import io
import json
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

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

if TYPE_CHECKING:
    import lark_oapi as lark

DEFAULT_API_BASE_URL = "https://open.feishu.cn"
GROUP_CHATS = frozenset({"group", "topic_group"})
# Open Platform codes: 99991400 is its rate limit; 99991661/99991663/99991668 a missing or stale token.
RATE_LIMITED = 99991400
TOKEN_INVALID = frozenset({99991661, 99991663, 99991668})
# Signed pushes older (or newer) than this are refused, as Slack does with its requests.
REPLAY_WINDOW_SECONDS = 5 * 60
# A tenant_access_token lives two hours; one is fetched again this long before it expires.
TOKEN_EARLY_SECONDS = 300
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif", "image/bmp", "image/tiff"})
MAX_IMAGE_BYTES = 10 * 1024 * 1024

# (api base, app_id, sha256(app_secret)) -> (token, expires at): shared by the adapters of one process.
_tenant_tokens: dict[tuple[str, str, str], tuple[str, float]] = {}


def _decrypt(sealed: str, encrypt_key: str) -> bytes:
    """An encrypted push's plaintext: Base64 of a 16-byte IV and AES-256-CBC ciphertext under
    sha256(encrypt_key), PKCS#7-padded. Done with `cryptography` rather than the SDK's `AESCipher`, whose
    import loads all of lark-oapi (seconds) on the webhook's request path."""
    raw = base64.b64decode(sealed, validate=True)
    if len(raw) < 32 or len(raw) % 16:
        raise ValueError("not AES-CBC ciphertext")
    key = hashlib.sha256(encrypt_key.encode()).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


def _card(text: str) -> str:
    """A message card showing `text` as Markdown; `update_multi` lets an edit show for everyone in the chat."""
    return json.dumps(
        {
            "config": {"wide_screen_mode": True, "update_multi": True},
            "elements": [{"tag": "markdown", "content": text}],
        },
        ensure_ascii=False,
    )


MEMBER_ADDED = "im.chat.member.user.added_v1"
MEMBER_DELETED = "im.chat.member.user.deleted_v1"
BOT_ADDED = "im.chat.member.bot.added_v1"
REACTION_CREATED = "im.message.reaction.created_v1"
REACTION_DELETED = "im.message.reaction.deleted_v1"
RECALLED = "im.message.recalled_v1"
CARD_ACTION = "card.action.trigger"


def _open_id(ids: Any) -> str:
    """A user's open_id (else user_id, union_id) from the platform's id object."""
    if not isinstance(ids, dict):
        return ""
    return str(ids.get("open_id") or ids.get("user_id") or ids.get("union_id") or "")


class LarkAdapter(PlatformAdapter):
    platform: ClassVar[str] = "lark"
    # A card's request body may not exceed 30 KB; 4,000 characters stay under it even with every character
    # escaped as JSON `\\uXXXX` inside the card's own JSON. The Open Platform allows 5 messages a second per
    # chat and 5 updates a second per message; two writes a second leaves room for other bots in a group.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=True,
        threads=True,
        max_message_chars=4000,
        edit_interval_seconds=0.5,
        max_file_bytes=30 * 1024 * 1024,
        event_types=(
            "member.joined",
            "member.left",
            "reaction.added",
            "reaction.removed",
            "message.recalled",
            "card.clicked",
            "bot.added",
        ),
    )
    credential_keys: ClassVar[tuple[str, ...]] = (
        "app_id",
        "app_secret",
        "verification_token",
        "encrypt_key",
        "api_base_url",
        "bot_open_id",
        "card_toast",
    )
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "app_id",
            required=True,
            help="The app's App ID: Lark / Feishu developer console → the app → Credentials & Basic Info.",
            link="https://open.feishu.cn/app",
            pattern=r"^cli_",
            pattern_hint="an App ID (starting cli_)",
        ),
        CredentialField(
            "app_secret",
            required=True,
            secret=True,
            help="The App Secret, on the same page. It buys the tenant access token.",
            link="https://open.feishu.cn/app",
        ),
        CredentialField(
            "verification_token",
            secret=True,
            help="Events and callbacks → Encryption strategy → Verification Token (this or the encrypt key "
            "is needed for events to be taken).",
            link="https://open.feishu.cn/app",
        ),
        CredentialField(
            "encrypt_key",
            secret=True,
            help="Events and callbacks → Encryption strategy → Encrypt Key (optional; when set, pushes are "
            "signed and encrypted).",
            link="https://open.feishu.cn/app",
        ),
        CredentialField(
            "bot_open_id",
            help="Optional: the bot's open_id, for mentions in groups; filled by Test connection and by "
            "setting the platform webhook.",
        ),
        CredentialField(
            "api_base_url",
            help="Optional: the Open Platform's origin (default Feishu's; https://open.larksuite.com for Lark).",
        ),
        CredentialField(
            "card_toast",
            help="Optional: the toast a user sees when they click a button in one of the bot's cards (the "
            "click itself goes to the bindings as card.clicked); empty shows none.",
        ),
    )
    # Events are taken only when one of these proves them (`verify`): a bot with neither is refused on save.
    EVENT_PROOF_KEYS: ClassVar[tuple[str, str]] = ("verification_token", "encrypt_key")

    @classmethod
    def credentials_problems(cls, credentials: Mapping[str, Any]) -> dict[str, str]:
        problems = super().credentials_problems(credentials)
        if not any(credentials.get(key) for key in cls.EVENT_PROOF_KEYS):
            problems.setdefault(
                "credentials.verification_token",
                "Give the verification token or the encrypt key (or both): without either, no event is taken.",
            )
        return problems

    _client: lark.Client | None = None
    _decoded: tuple[bytes, dict[str, Any]] | None = None

    @property
    def base_url(self) -> str:
        return self.api_base_url or DEFAULT_API_BASE_URL

    def _secret(self, key: str) -> str:
        return str(self.credentials.get(key) or "")

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        token = self._secret("verification_token")
        encrypt_key = self._secret("encrypt_key")
        if not token and not encrypt_key:
            raise InboundRefusedError(
                "forged", "the bot has neither verification_token nor encrypt_key; copy them from the app's page"
            )
        signature = request.header("x-lark-signature")
        if encrypt_key and signature:
            # A signed push is checked on its raw bytes before anything reads them.
            self._verify_signature(request, encrypt_key, signature)
        payload = self._payload(request)
        if encrypt_key and not signature and payload.get("type") != "url_verification":
            # The platform signs event pushes (not its URL check) when an encrypt key is set.
            raise InboundRefusedError("forged", "the push is not signed", status=401)
        header = payload.get("header") if isinstance(payload.get("header"), dict) else None
        given = str((header or payload).get("token") or "")
        if token and not hmac.compare_digest(given.encode(), token.encode()):
            raise InboundRefusedError("forged", "the verification token does not match", status=401)

    @staticmethod
    def _verify_signature(request: InboundRequest, encrypt_key: str, signature: str) -> None:
        timestamp = request.header("x-lark-request-timestamp")
        nonce = request.header("x-lark-request-nonce")
        signed = (timestamp + nonce + encrypt_key).encode() + request.body
        expected = hashlib.sha256(signed).hexdigest()
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            raise InboundRefusedError("forged", "the Lark signature does not match", status=401)
        # A replayed push within the window is the same event_id again, which the gateway takes once; an
        # older one is refused here, as Slack's are.
        try:
            age = abs(time.time() - int(timestamp))
        except (ValueError, OverflowError):
            raise InboundRefusedError("forged", "the push timestamp is not a number", status=401) from None
        if age > REPLAY_WINDOW_SECONDS:
            raise InboundRefusedError("replayed", "the push was signed more than five minutes ago", status=401)

    def _payload(self, request: InboundRequest) -> dict[str, Any]:
        """The request's JSON, decrypted when it came encrypted (decoded once per request)."""
        if self._decoded is not None and self._decoded[0] is request.body:
            return self._decoded[1]
        payload = inbound_json_object(request.body, what="not a Lark event")
        if "encrypt" in payload:
            encrypt_key = self._secret("encrypt_key")
            if not encrypt_key:
                raise InboundRefusedError("forged", "an encrypted event, but the bot has no encrypt_key", status=401)
            try:
                plaintext = _decrypt(str(payload["encrypt"]), encrypt_key)
            except (ValueError, TypeError, binascii.Error):
                raise InboundRefusedError(
                    "forged", "the event does not decrypt with the encrypt_key", status=401
                ) from None
            payload = inbound_json_object(plaintext, what="not a Lark event")
        self._decoded = (request.body, payload)
        return payload

    def parse(self, request: InboundRequest) -> InboundBatch:
        payload = self._payload(request)
        with malformed_unless_shaped("not a Lark event"):
            return self._batch(payload)

    def _batch(self, payload: dict[str, Any]) -> InboundBatch:
        if payload.get("type") == "url_verification":
            return InboundBatch(response={"challenge": str(payload.get("challenge") or "")})
        header = payload.get("header")
        event = payload.get("event")
        if payload.get("schema") != "2.0" or not isinstance(header, dict) or not isinstance(event, dict):
            raise InboundRefusedError("malformed", "not a Lark event of subscription schema 2.0", status=400)
        if header.get("event_type") != "im.message.receive_v1":
            if not header.get("event_id"):
                raise InboundRefusedError("malformed", "a Lark event without its event_id", status=400)
            # Other subscriptions: the events beyond messages (docs/platform-events.md), anything else
            # (read receipts, chat changes) acknowledged.
            envelopes = self._events(header, event)
            response = self._card_answer() if header.get("event_type") == CARD_ACTION else None
            return InboundBatch(updates=[InboundUpdate(envelope=e) for e in envelopes], response=response)
        message = event.get("message")
        sender = event.get("sender")
        if not isinstance(message, dict) or not isinstance(sender, dict) or not header.get("event_id"):
            raise InboundRefusedError("malformed", "an im.message.receive_v1 event without its message", status=400)
        if sender.get("sender_type") != "user":
            return InboundBatch()  # apps, this bot included, are not answered
        # A group message that does not mention the bot (pushed only with the "read all group messages"
        # permission) is forwarded with `data.mentioned: false`: the binding's trigger policy decides.
        mentioned = message.get("chat_type") not in GROUP_CHATS or self._mentioned(message)
        text, files = self._content(message)
        if not text and not files:
            return InboundBatch()
        envelope = self._envelope(header, sender, message, text)
        envelope["data"]["mentioned"] = mentioned
        return InboundBatch(updates=[InboundUpdate(envelope=envelope, files=files)])

    def _card_answer(self) -> dict[str, Any]:
        """The answer to a card callback, which the platform wants within 3 seconds (the webhook answers
        before any run starts): the bot's `card_toast` as a toast when it has one, else nothing to show."""
        toast = str(self.credentials.get("card_toast") or "")
        return {"toast": {"type": "info", "content": toast}} if toast else {}

    def _events(self, header: dict[str, Any], event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = str(header.get("event_type") or "")
        event_id = f"lark:{self.bot_id}:{header['event_id']}"
        raw = {"schema": "2.0", "header": {k: v for k, v in header.items() if k != "token"}, "event": event}
        try:
            event_time: float | None = int(str(header.get("create_time"))) / 1000
        except ValueError:
            event_time = None
        common: dict[str, Any] = {"source_event_type": kind, "raw": raw, "event_time": event_time}
        chat_id = str(event.get("chat_id") or "") or None
        operator = _open_id(event.get("operator_id"))
        if kind in (MEMBER_ADDED, MEMBER_DELETED) and chat_id:
            users = [u for u in event.get("users") or () if isinstance(u, dict) and _open_id(u.get("user_id"))]
            return [
                platform_event_envelope(
                    event_id=f"{event_id}:{_open_id(user.get('user_id'))}" if len(users) > 1 else event_id,
                    event_type="member.joined" if kind == MEMBER_ADDED else "member.left",
                    chat_id=chat_id,
                    chat_type="group",
                    actor_id=_open_id(user.get("user_id")),
                    actor_name=user.get("name"),
                    extra={"operator_id": operator} if operator and operator != _open_id(user.get("user_id")) else None,
                    **common,
                )
                for user in users
            ]
        if kind == BOT_ADDED and chat_id:
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type="bot.added",
                    chat_id=chat_id,
                    chat_type="group",
                    actor_id=operator or None,
                    **common,
                )
            ]
        if kind in (REACTION_CREATED, REACTION_DELETED):
            message_id = str(event.get("message_id") or "")
            user = _open_id(event.get("user_id"))
            if not message_id or event.get("operator_type") not in (None, "user") or not user:
                return []  # an app's reaction (this bot's own included)
            emoji = event.get("reaction_type") or {}
            # The reaction events do not name the chat: an answer goes as a reply to the message.
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type="reaction.added" if kind == REACTION_CREATED else "reaction.removed",
                    chat_id=None,
                    chat_type=None,
                    actor_id=user,
                    target_message_id=message_id,
                    reaction=str(emoji.get("emoji_type") or "") if isinstance(emoji, dict) else "",
                    reply_target=ReplyTarget(chat_id=message_id, reply_to_message_id=message_id),
                    **common,
                )
            ]
        if kind == RECALLED and chat_id:
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type="message.recalled",
                    chat_id=chat_id,
                    chat_type=None,
                    target_message_id=str(event.get("message_id") or "") or None,
                    extra={"recall_type": str(event.get("recall_type") or "")},
                    **common,
                )
            ]
        if kind == CARD_ACTION:
            context = event.get("context") or {}
            chat = str(context.get("open_chat_id") or "")
            clicked = str(context.get("open_message_id") or "") or None
            clicker = _open_id(event.get("operator"))
            action = event.get("action") or {}
            if not chat:
                return []  # a card outside a chat (a link preview): no chat to answer in
            return [
                platform_event_envelope(
                    event_id=event_id,
                    event_type="card.clicked",
                    chat_id=chat,
                    chat_type=None,
                    actor_id=clicker or None,
                    target_message_id=clicked,
                    action={k: action.get(k) for k in ("value", "tag", "name", "option", "form_value") if k in action},
                    **common,
                )
            ]
        return []

    def _mentioned(self, message: dict[str, Any]) -> bool:
        mentions = [m for m in message.get("mentions") or () if isinstance(m, dict)]
        own = self._secret("bot_open_id")
        if not own:
            # Without the bot's open_id any mention counts: by default the platform only pushes the group
            # messages that mention the bot.
            return bool(mentions)
        return any((m.get("id") or {}).get("open_id") == own for m in mentions)

    def _mention_text(self, message: dict[str, Any], text: str) -> str:
        own = self._secret("bot_open_id")
        for mention in message.get("mentions") or ():
            if not isinstance(mention, dict) or not mention.get("key"):
                continue
            is_bot = (mention.get("id") or {}).get("open_id") == own if own else True
            text = text.replace(str(mention["key"]), "" if is_bot else f"@{mention.get('name') or ''}")
        return " ".join(text.split()) if "\n" not in text else text.strip()

    def _content(self, message: dict[str, Any]) -> tuple[str, list[PlatformFileRef]]:
        try:
            content = inbound_json_object(str(message.get("content") or "{}"), what="content")
        except InboundRefusedError:
            return "", []
        kind = message.get("message_type")
        message_id = str(message.get("message_id") or "")
        files: list[PlatformFileRef] = []

        def image(key: str) -> None:
            files.append(
                PlatformFileRef(
                    ref={"message_id": message_id, "file_key": key, "type": "image"},
                    name=f"image-{key[-12:]}.png",
                    kind="image",
                )
            )

        if kind == "text":
            return self._mention_text(message, str(content.get("text") or "")), files
        if kind == "image" and content.get("image_key"):
            image(str(content["image_key"]))
            return "", files
        if kind in ("file", "audio", "media") and content.get("file_key"):
            key = str(content["file_key"])
            name = str(content.get("file_name") or f"{kind}-{key[-12:]}")
            files.append(
                PlatformFileRef(
                    ref={"message_id": message_id, "file_key": key, "type": "file"},
                    name=name,
                    kind={"audio": "audio", "media": "video"}.get(str(kind), "file"),
                )
            )
            return "", files
        if kind == "post":
            # Rich text: a title and lines of elements; some pushes wrap it in a locale ("zh_cn": {...}).
            if "content" not in content and content:
                first = next(iter(content.values()))
                content = first if isinstance(first, dict) else {}
            lines = [str(content.get("title") or "")]
            for line in content.get("content") or ():
                pieces = []
                for element in line if isinstance(line, list) else ():
                    if not isinstance(element, dict):
                        continue
                    if element.get("tag") in ("text", "a", "md"):
                        pieces.append(str(element.get("text") or ""))
                    elif element.get("tag") == "at" and element.get("user_name"):
                        own = self._secret("bot_open_id")
                        if element.get("user_id") != own or not own:
                            pieces.append(f"@{element['user_name']}")
                    elif element.get("tag") == "img" and element.get("image_key"):
                        image(str(element["image_key"]))
                lines.append("".join(pieces))
            return self._mention_text(message, "\n".join(line for line in lines if line.strip())), files
        return "", files

    def _envelope(
        self, header: dict[str, Any], sender: dict[str, Any], message: dict[str, Any], text: str
    ) -> dict[str, Any]:
        chat_id = str(message.get("chat_id") or "")
        chat_type = str(message.get("chat_type") or "p2p")
        thread = str(message["thread_id"]) if message.get("thread_id") else None
        in_group = chat_type in GROUP_CHATS
        target = ReplyTarget(
            chat_id=chat_id,
            thread_id=thread,
            reply_to_message_id=str(message.get("message_id")) if in_group or thread else None,
        )
        ids = sender.get("sender_id")
        sender_ids: dict[str, Any] = ids if isinstance(ids, dict) else {}
        actor_id = str(sender_ids.get("open_id") or sender_ids.get("user_id") or sender_ids.get("union_id") or "")
        try:
            event_time = int(str(header.get("create_time") or message.get("create_time"))) / 1000
        except ValueError:
            event_time = time.time()
        return {
            "event_id": f"lark:{self.bot_id}:{header['event_id']}",
            "event_type": "message.received",
            "source_event_type": "im.message.receive_v1",
            "thread_id": thread,
            "actor": {
                "actor_type": "user",
                "actor_id": actor_id,
                "metadata": {k: v for k, v in sender_ids.items() if isinstance(v, str) and v},
            },
            "subject": {
                "subject_type": "message",
                "subject_id": str(message.get("message_id") or ""),
                "data": {"chat_type": chat_type, "message_type": str(message.get("message_type") or "")},
            },
            "input": {"text": text or None},
            "data": {
                "chat_id": chat_id,
                "chat_type": chat_type,
                "reply_target": target.as_data(),
                "tenant_key": header.get("tenant_key"),
                "raw": {
                    "schema": "2.0",
                    "header": {k: v for k, v in header.items() if k != "token"},
                    "event": {
                        "sender": sender,
                        "message": message,
                    },
                },
            },
            "event_time": event_time,
        }

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        from lark_oapi.api.im.v1 import GetMessageResourceRequest

        message_id, key = str(ref.ref.get("message_id") or ""), str(ref.ref.get("file_key") or "")
        if not message_id or not key:
            raise PlatformAPIError("the file reference has no message_id or file_key")
        request = (
            GetMessageResourceRequest.builder()
            .message_id(message_id)
            .file_key(key)
            .type(str(ref.ref.get("type") or "file"))
            .build()
        )
        response = await self._call("message_resource.get", self.client().im.v1.message_resource.aget, request)
        from lark_oapi.core.utils.files import Files

        data = response.file.read() if response.file is not None else b""
        headers = {k.lower(): v for k, v in (response.raw.headers or {}).items()}
        # An image message names no file; the download does. (The SDK looks the header up by its
        # capitalised name, which httpx's lower-cased headers never match.)
        given = (
            Files.parse_file_name({"Content-Disposition": headers["content-disposition"]})
            if ("content-disposition" in headers)
            else None
        )
        name = str(given) if ref.kind == "image" and given else ref.name
        mime_type = ref.mime_type or str(headers.get("content-type") or "").split(";")[0].strip()
        return FetchedFile(data=data, name=name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    def client(self) -> lark.Client:
        if self._client is None:
            import lark_oapi as lark

            if not self._secret("app_id") or not self._secret("app_secret"):
                raise PlatformAPIError("the bot has no Lark app_id / app_secret")
            try:
                # The token is bought here (`_tenant_token`, async) and handed to every call, instead of
                # the SDK's own token manager, which fetches it with a blocking request.
                self._client = (
                    lark.Client.builder()
                    .app_id(self._secret("app_id"))
                    .app_secret(self._secret("app_secret"))
                    .domain(self.base_url)
                    .enable_set_token(True)
                    .log_level(lark.LogLevel.WARNING)
                    .build()
                )
            except ValueError as exc:
                raise PlatformAPIError(f"api_base_url is not usable: {exc}") from exc
        return self._client

    def _token_key(self) -> tuple[str, str, str]:
        secret = hashlib.sha256(self._secret("app_secret").encode()).hexdigest()
        return self.base_url, self._secret("app_id"), secret

    async def _tenant_token(self) -> str:
        key = self._token_key()
        cached = _tenant_tokens.get(key)
        if cached is not None and cached[1] > time.time():
            return cached[0]
        from lark_oapi.api.auth.v3 import InternalTenantAccessTokenRequest, InternalTenantAccessTokenRequestBody

        request = (
            InternalTenantAccessTokenRequest.builder()
            .request_body(
                InternalTenantAccessTokenRequestBody.builder()
                .app_id(self._secret("app_id"))
                .app_secret(self._secret("app_secret"))
                .build()
            )
            .build()
        )
        await self.api_base_url_check()
        try:
            response = await self.client().auth.v3.tenant_access_token.ainternal(request)
        except Exception as exc:  # the SDK lets httpx's and its own errors through
            # Buying a token writes nothing, and the call it was bought for has not been made.
            raise PlatformAPIError(f"Lark tenant_access_token: {exc}", retryable=True) from exc
        self._raise_for(response, "tenant_access_token", writes=False)
        body = json.loads(response.raw.content or b"{}")
        token = str(body.get("tenant_access_token") or "")
        if not token:
            raise PlatformAPIError("Lark tenant_access_token: the answer carries no token")
        expire = float(body.get("expire") or 7200)
        _tenant_tokens[key] = (token, time.time() + max(0.0, expire - TOKEN_EARLY_SECONDS))
        return token

    @staticmethod
    def _raise_for(response: Any, what: str, *, writes: bool = True) -> None:
        raw = response.raw
        status = getattr(raw, "status_code", 0) or 0
        if response.code == 0 and status < 400:
            return
        message = f"Lark {what}: {response.msg or f'HTTP {status}'} (code {response.code})"
        if status == 429 or response.code == RATE_LIMITED:
            headers = getattr(raw, "headers", None) or {}
            reset = next((v for k, v in headers.items() if k.lower() == "x-ogw-ratelimit-reset"), None)
            try:
                retry_after = max(0.0, float(reset)) if reset is not None else 1.0
            except ValueError:
                retry_after = 1.0
            raise PlatformAPIError(message, retry_after=retry_after)
        # A 5xx does not say whether a write (a message, a reaction, an upload) was carried out.
        raise PlatformAPIError(message, retryable=status >= 500, outcome_unknown=writes and status >= 500)

    async def _call(self, what: str, fn: Any, request: Any) -> Any:
        """One SDK call with the tenant token; errors (the body's `code`, HTTP 429) as `PlatformAPIError`.
        A token the platform no longer takes is dropped and bought again once."""
        import lark_oapi as lark

        # The SDK makes a client per call and takes no transport: the override's address is checked first.
        await self.api_base_url_check()
        for attempt in (1, 2):
            option = lark.RequestOption.builder().tenant_access_token(await self._tenant_token()).build()
            try:
                response = await fn(request, option)
            except Exception as exc:  # the SDK lets httpx's and its own errors through
                raise transport_failure(f"Lark {what}: {exc}", exc) from exc
            if response.code in TOKEN_INVALID and attempt == 1:
                _tenant_tokens.pop(self._token_key(), None)
                continue
            self._raise_for(response, what)
            return response
        raise PlatformAPIError(f"Lark {what}: the tenant_access_token is refused")  # pragma: no cover

    async def _send(self, target: ReplyTarget, msg_type: str, content: str) -> SentMessage:
        from lark_oapi.api.im.v1 import (
            CreateMessageRequest,
            CreateMessageRequestBody,
            ReplyMessageRequest,
            ReplyMessageRequestBody,
        )

        # The Open Platform posts one message per uuid within an hour. It is new for every call: the host's
        # delivery never repeats a send whose outcome is unknown (`platforms.delivery`).
        dedupe = str(uuid.uuid4())
        im = self.client().im.v1.message
        if target.reply_to_message_id:
            reply = (
                ReplyMessageRequest.builder()
                .message_id(target.reply_to_message_id)
                .request_body(
                    ReplyMessageRequestBody.builder()
                    .msg_type(msg_type)
                    .content(content)
                    .reply_in_thread(bool(target.thread_id))
                    .uuid(dedupe)
                    .build()
                )
                .build()
            )
            response = await self._call("message.reply", im.areply, reply)
        else:
            create = (
                CreateMessageRequest.builder()
                .receive_id_type("chat_id")
                .request_body(
                    CreateMessageRequestBody.builder()
                    .receive_id(target.chat_id)
                    .msg_type(msg_type)
                    .content(content)
                    .uuid(dedupe)
                    .build()
                )
                .build()
            )
            response = await self._call("message.create", im.acreate, create)
        data = response.data
        return SentMessage(
            chat_id=str(getattr(data, "chat_id", None) or target.chat_id), message_id=str(data.message_id)
        )

    def mention_markup(self, actor: dict[str, Any]) -> str | None:
        # The reply is a card whose Markdown mentions a user by open_id.
        open_id = (actor.get("metadata") or {}).get("open_id")
        return (
            f"<at id={open_id}></at>"
            if isinstance(open_id, str) and open_id.isascii() and open_id.replace("_", "").isalnum()
            else None
        )

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        return await self._send(target, "interactive", _card(text))

    async def edit_text(self, message: SentMessage, text: str) -> None:
        from lark_oapi.api.im.v1 import PatchMessageRequest, PatchMessageRequestBody

        request = (
            PatchMessageRequest.builder()
            .message_id(message.message_id)
            .request_body(PatchMessageRequestBody.builder().content(_card(text)).build())
            .build()
        )
        await self._call("message.patch", self.client().im.v1.message.apatch, request)

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        from lark_oapi.api.im.v1 import (
            CreateFileRequest,
            CreateFileRequestBody,
            CreateImageRequest,
            CreateImageRequestBody,
        )

        im = self.client().im.v1
        if file.mime_type in IMAGE_TYPES and len(file.data) <= MAX_IMAGE_BYTES:
            image = (
                CreateImageRequest.builder()
                .request_body(
                    CreateImageRequestBody.builder().image_type("message").image(io.BytesIO(file.data)).build()
                )
                .build()
            )
            uploaded = await self._call("image.create", im.image.acreate, image)
            sent = await self._send(target, "image", json.dumps({"image_key": uploaded.data.image_key}))
        else:
            upload = (
                CreateFileRequest.builder()
                .request_body(
                    CreateFileRequestBody.builder()
                    .file_type(_file_type(file))
                    .file_name(file.name)
                    .file(io.BytesIO(file.data))
                    .build()
                )
                .build()
            )
            uploaded = await self._call("file.create", im.file.acreate, upload)
            sent = await self._send(target, "file", json.dumps({"file_key": uploaded.data.file_key}))
        if file.caption:
            await self.send_text(target, file.caption)
        return sent

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        from lark_oapi.api.im.v1 import CreateMessageReactionRequest, CreateMessageReactionRequestBody, Emoji

        request = (
            CreateMessageReactionRequest.builder()
            .message_id(message.message_id)
            .request_body(
                CreateMessageReactionRequestBody.builder()
                .reaction_type(Emoji.builder().emoji_type(reaction).build())
                .build()
            )
            .build()
        )
        await self._call("message_reaction.create", self.client().im.v1.message_reaction.acreate, request)

    async def identity(self) -> str:
        await self._tenant_token()
        info = await self._bot_info()
        return f"Lark issued a tenant token; the bot is {info.get('app_name') or self._secret('app_id')}"

    async def _bot_info(self) -> dict[str, Any]:
        import lark_oapi as lark

        request = (
            lark.BaseRequest.builder()
            .http_method(lark.HttpMethod.GET)
            .uri("/open-apis/bot/v3/info")
            .token_types({lark.AccessTokenType.TENANT})
            .build()
        )
        response = await self._call("bot.info", self.client().arequest, request)
        body = json.loads(response.raw.content or b"{}")
        bot = body.get("bot") if isinstance(body.get("bot"), dict) else {}
        if bot.get("open_id"):
            self.credentials["bot_open_id"] = str(bot["open_id"])
        return bot

    async def webhook_register(self, url: str) -> str:
        """The Open Platform takes the request URL only on the app's console; this learns the bot's open_id
        (for mentions in groups) and says what to paste where."""
        bot = await self._bot_info()
        name = bot.get("app_name") or self._secret("app_id")
        return (
            f"{name}: paste {url} as the request URL under Events and callbacks on the app's console and "
            "subscribe to im.message.receive_v1"
        )


def _file_type(file: OutboundFile) -> str:
    """The `file_type` the Open Platform files upload wants: a few known kinds, else `stream`."""
    extension = file.name.rsplit(".", 1)[-1].lower() if "." in file.name else ""
    known = {"opus": "opus", "mp4": "mp4", "pdf": "pdf", "doc": "doc", "docx": "doc", "xls": "xls", "xlsx": "xls",
             "ppt": "ppt", "pptx": "ppt"}  # fmt: skip
    return known.get(extension, "stream")
