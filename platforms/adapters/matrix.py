"""Matrix, as a client-server API bot (any homeserver: Synapse, Conduit, Dendrite, matrix.org) on plain
httpx: the connector process long-polls `GET /_matrix/client/v3/sync` with the `since` token of the last
batch, kept per bot (`PlatformCursor`) so a restart neither replays nor skips; replies go out with
`PUT /rooms/{room}/send/m.room.message/{txn}`, streamed by edits (`m.replace` relations), reactions are
`m.reaction` annotations. Bridges (mautrix-signal, mautrix-whatsapp, …) put Signal, WhatsApp and others
into Matrix rooms, so a Matrix bot answers there too.

Credentials: `homeserver_url` (e.g. `https://matrix.example.org`), `access_token` (the bot account's: log
in once with its password — `POST /_matrix/client/v3/login` — or Element → Settings → Help & About →
Access Token), `user_id`? (`@bot:example.org`; asked of `/account/whoami` when absent). `api_base_url`,
when set, is used instead of `homeserver_url` (a proxy).

Why httpx and not matrix-nio: nio makes its own aiohttp session (no way to put the outbound address guard
under it without replacing its internals), retries 429s inside itself (the host's delivery decides
retries, and must know when a write may have happened), and brings eight dependencies for end-to-end
encryption the host does not do; the few calls a bot needs are plain JSON over HTTP.

A first sync (no stored token) reads no history: only what arrives after it is answered. Invitations are
accepted (`POST /join/{room}`) and become `bot.added`. In a room of more than two members a message is a
group message, `data.mentioned` saying whether it mentions the bot (`m.mentions`, its user id, or a pill
linking to it); a room of two is a private chat. `m.room.message` text and notices of others (the bot's
own are skipped), files (`m.image`, `m.file`, `m.audio`, `m.video`, fetched from the homeserver's media
repository), edits (`m.replace` → `message.edited`), `m.reaction` (→ `reaction.added`), redactions
(→ `message.recalled`) and membership (`m.room.member` join/leave/ban → `member.joined`/`member.left`).
Encrypted rooms are not supported: `m.room.encrypted` events are skipped (the bot has no keys), so invite
it to unencrypted rooms.

A send's transaction id is derived from what it answers (the message replied to and the text), so a retry
after a lost answer is the same transaction and the homeserver keeps one message; an edit's from the
edited message and its text.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
import uuid
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from foundation.outbound import AddressRefusedError, guarded_async_transport
from platforms.adapters.longconn import cursor_get, cursor_set, event_update
from platforms.interface import (
    CredentialField,
    FetchedFile,
    InboundBatch,
    InboundRefusedError,
    InboundRequest,
    InboundUpdate,
    PlatformAdapter,
    PlatformAPIError,
    PlatformCapabilities,
    PlatformConnector,
    PlatformFileRef,
    ReplyTarget,
    SentMessage,
    transport_failure,
)

logger = logging.getLogger(__name__)

CLIENT = "/_matrix/client/v3"
REQUEST_TIMEOUT = 30.0
CURSOR = "matrix_since"
FILE_TYPES = {"m.image": "image", "m.file": "file", "m.audio": "audio", "m.video": "video"}
TEXT_TYPES = frozenset({"m.text", "m.notice", "m.emote"})
_MXC = re.compile(r"^mxc://([A-Za-z0-9.:\[\]-]+)/([A-Za-z0-9_-]+)$")
_REPLY_FALLBACK = re.compile(r"\A(?:>[^\n]*\n)+\n?")


class MatrixUnauthorizedError(PlatformAPIError):
    """The homeserver refused the bot's access token."""


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _event_id(bot_id: str, *parts: str) -> str:
    # Matrix event ids (`$…`, base64 with `+`, `/`, `_`) are not URL-safe gateway event ids: a digest is.
    return f"matrix:{bot_id}:{hashlib.sha256(chr(31).join(parts).encode()).hexdigest()[:40]}"


class MatrixAdapter(PlatformAdapter):
    platform: ClassVar[str] = "matrix"
    # Matrix events are at most 65,536 bytes of JSON; 16,000 characters of text stays under it in any
    # script. Homeservers rate-limit sends per user (Synapse: about 0.2 s apart, bursts allowed).
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=False,
        threads=False,
        max_message_chars=16000,
        edit_interval_seconds=1.0,
        max_file_bytes=50 * 1024 * 1024,
        event_types=(
            "member.joined",
            "member.left",
            "reaction.added",
            "message.edited",
            "message.recalled",
            "bot.added",
        ),
    )
    credential_keys: ClassVar[tuple[str, ...]] = ("homeserver_url", "access_token", "user_id", "api_base_url")
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "homeserver_url",
            required=True,
            help="The homeserver's client API address, e.g. https://matrix.example.org.",
            pattern=r"^https?://",
            pattern_hint="an http(s):// address",
        ),
        CredentialField(
            "access_token",
            required=True,
            secret=True,
            help="The bot account's access token: log in as the bot (POST /_matrix/client/v3/login) or "
            "Element → Settings → Help & About → Access Token.",
        ),
        CredentialField(
            "user_id",
            help="Optional: the bot's user id, e.g. @langbot:example.org (asked of the homeserver if absent).",
            pattern=r"^@[^:\s]+:\S+$",
            pattern_hint="a Matrix user id (@name:server)",
        ),
        CredentialField("api_base_url", help="Optional: used instead of homeserver_url (a proxy)."),
    )
    connector_class: ClassVar[type[PlatformConnector] | None] = None  # set below the connector's class
    # No webhook: events come only over the connector (the webhook route answers 404).
    connection_kinds: ClassVar[tuple[str, ...]] = ("sync long poll",)

    _http: httpx.AsyncClient | None = None
    _user_id: str = ""

    def _value(self, key: str) -> str:
        return str(self.credentials.get(key) or "").strip()

    @property
    def base_url(self) -> str:
        base = self.api_base_url or self._value("homeserver_url").rstrip("/")
        if not base.startswith(("https://", "http://")):
            raise PlatformAPIError("the bot has no Matrix homeserver_url (https://…)")
        return base

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            if not self._value("access_token"):
                raise PlatformAPIError("the bot has no Matrix access_token")
            self._http = httpx.AsyncClient(
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=REQUEST_TIMEOUT,
                follow_redirects=False,
                headers={"Authorization": f"Bearer {self._value('access_token')}"},
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def request(
        self, method: str, path: str, *, idempotent: bool = False, raw: bool = False, **kwargs: Any
    ) -> Any:
        """One client-server API call; the homeserver's `errcode`s as `PlatformAPIError`s."""
        what = f"Matrix {method} {path.split('?')[0][:120]}"
        try:
            response = await self.http().request(method, f"{self.base_url}{path}", **kwargs)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"{what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            error = transport_failure(f"{what}: {exc}", exc)
            error.outcome_unknown = error.outcome_unknown and not idempotent
            raise error from exc
        if response.status_code >= 400:
            try:
                body = _obj(response.json())
            except ValueError:
                body = {}
            code = str(body.get("errcode") or "")
            detail = f"{what}: HTTP {response.status_code} {code} {str(body.get('error') or '')[:200]}".strip()
            if response.status_code == 429 or code == "M_LIMIT_EXCEEDED":
                wait = body.get("retry_after_ms")
                seconds = float(wait) / 1000 if isinstance(wait, int | float) else 1.0
                raise PlatformAPIError(detail, retry_after=max(0.5, seconds))
            if response.status_code == 401 or code in ("M_UNKNOWN_TOKEN", "M_MISSING_TOKEN"):
                raise MatrixUnauthorizedError(detail)
            raise PlatformAPIError(
                detail,
                retryable=response.status_code >= 500,
                outcome_unknown=response.status_code >= 500 and not idempotent,
            )
        if raw:
            return response
        try:
            return response.json()
        except ValueError:
            return {}

    async def whoami(self) -> str:
        """The bot's user id: the credentials' or the homeserver's answer."""
        if not self._value("user_id") and not self._user_id:
            found = _obj(await self.request("GET", f"{CLIENT}/account/whoami", idempotent=True))
            # Kept beside the credentials, not in them: the connector finds its bot's cursor by them.
            self._user_id = str(found.get("user_id") or "")
        return self._value("user_id") or self._user_id

    # -- inbound --------------------------------------------------------------------------------
    def verify(self, request: InboundRequest) -> None:
        raise InboundRefusedError("malformed", "Matrix events are read by the bot's sync, not a webhook", status=404)

    def parse(self, request: InboundRequest) -> InboundBatch:  # pragma: no cover - verify refuses first
        return InboundBatch()

    def room_event_update(
        self, room_id: str, event: dict[str, Any], *, own_user_id: str, group: bool
    ) -> InboundUpdate | None:
        """The update of one timeline event of a joined room, or None when it is nothing for the bot.
        Raises ValueError/TypeError/KeyError on junk."""
        kind = str(event["type"])
        event_id = str(event["event_id"])
        sender = str(event["sender"])
        if not event_id.startswith("$") or not room_id.startswith("!"):
            raise ValueError("event or room id")
        content = _obj(event.get("content"))
        chat_type = "group" if group else "private"
        base: dict[str, Any] = {
            "event_id": _event_id(self.bot_id, room_id, event_id),
            "source_event_type": kind,
            "chat_id": room_id,
            "chat_type": chat_type,
        }
        if kind == "m.room.member":
            member = str(event["state_key"])
            if member == own_user_id:
                return None
            membership = str(content.get("membership") or "")
            before = str(_obj(_obj(event.get("unsigned")).get("prev_content")).get("membership") or "")
            if membership == "join" and before != "join":
                event_type = "member.joined"
            elif membership in ("leave", "ban") and before == "join":
                event_type = "member.left"
            else:
                return None  # a profile change, an invite, a knock
            return event_update(
                **base,
                event_type=event_type,
                actor_id=member,
                actor_name=str(content.get("displayname") or member),
                reply_target=ReplyTarget(chat_id=room_id),
                raw=event,
            )
        if sender == own_user_id:
            return None
        if kind == "m.room.redaction":
            target = str(event.get("redacts") or content.get("redacts") or "")
            if not target:
                return None
            return event_update(
                **base, event_type="message.recalled", actor_id=sender, target_message_id=target, raw=event
            )
        relation = _obj(content.get("m.relates_to"))
        if kind == "m.reaction":
            if relation.get("rel_type") != "m.annotation" or not relation.get("event_id"):
                return None
            return event_update(
                **base,
                event_type="reaction.added",
                actor_id=sender,
                target_message_id=str(relation["event_id"]),
                reply_target=ReplyTarget(chat_id=room_id),
                extra={"reaction": str(relation.get("key") or "")[:100]},
                raw=event,
            )
        if kind != "m.room.message":
            return None  # m.room.encrypted among them: the bot has no keys
        if relation.get("rel_type") == "m.replace":
            new = _obj(content.get("m.new_content"))
            text = str(new.get("body") or "").strip()
            target = str(relation.get("event_id") or "")
            if not text or not target:
                return None
            return event_update(
                **base,
                event_type="message.edited",
                actor_id=sender,
                target_message_id=target,
                text=text,
                reply_target=ReplyTarget(chat_id=room_id, reply_to_message_id=target if group else None),
                extra={"mentioned": True if not group else self._mentions(new, own_user_id)},
                raw=event,
            )
        msgtype = str(content.get("msgtype") or "")
        files: list[PlatformFileRef] = []
        text = ""
        if msgtype in TEXT_TYPES:
            if msgtype == "m.notice":
                return None  # notices are what bots send: answering them loops bots into each other
            text = str(content.get("body") or "")
            if _obj(relation.get("m.in_reply_to")).get("event_id"):
                text = _REPLY_FALLBACK.sub("", text)
        elif msgtype in FILE_TYPES and _MXC.match(str(content.get("url") or "")):
            info = _obj(content.get("info"))
            files.append(
                PlatformFileRef(
                    ref={"mxc": str(content["url"])},
                    name=str(content.get("filename") or content.get("body") or "file")[:200],
                    mime_type=str(info.get("mimetype") or ""),
                    size=info.get("size") if isinstance(info.get("size"), int) else None,
                    kind=FILE_TYPES[msgtype],
                )
            )
        else:
            return None
        mentioned = True if not group else self._mentions(content, own_user_id)
        text = _strip_own_name(text.strip(), own_user_id)
        if not text and not files:
            return None
        # `answers` seeds the reply's transaction id (a direct reply names no message to derive it from).
        reply_target = ReplyTarget(
            chat_id=room_id, reply_to_message_id=event_id if group else None, extra={"answers": event_id}
        )
        return InboundUpdate(
            envelope={
                "event_id": base["event_id"],
                "event_type": "message.received",
                "source_event_type": f"{kind}:{msgtype}",
                "actor": {"actor_type": "user", "actor_id": sender, "actor_name": sender[:255]},
                "subject": {"subject_type": "message", "subject_id": event_id, "data": {"chat_type": chat_type}},
                "input": {"text": text or None},
                "data": {
                    "chat_id": room_id,
                    "chat_type": chat_type,
                    "mentioned": mentioned,
                    "matrix_event_id": event_id,
                    "reply_target": reply_target.as_data(),
                    "raw": event,
                },
                "event_time": _event_time(event.get("origin_server_ts")),
            },
            files=files,
        )

    @staticmethod
    def _mentions(content: dict[str, Any], own_user_id: str) -> bool:
        if not own_user_id:
            return False
        mentions = _obj(content.get("m.mentions"))
        if own_user_id in [str(u) for u in mentions.get("user_ids") or () if isinstance(u, str)]:
            return True
        body = str(content.get("body") or "")
        formatted = str(content.get("formatted_body") or "")
        return own_user_id in body or f"matrix.to/#/{own_user_id}" in formatted or quote(own_user_id) in formatted

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        found = _MXC.match(str(ref.ref.get("mxc") or ""))
        if found is None:
            raise PlatformAPIError("the file reference is not an mxc:// URI")
        server, media = found.group(1), found.group(2)
        try:
            # Authenticated media (Matrix 1.11); older homeservers serve only the unauthenticated path.
            response = await self.request(
                "GET", f"/_matrix/client/v1/media/download/{server}/{media}", idempotent=True, raw=True
            )
        except PlatformAPIError as exc:
            if "M_UNRECOGNIZED" not in str(exc) and "HTTP 404" not in str(exc):
                raise
            response = await self.request(
                "GET", f"/_matrix/media/v3/download/{server}/{media}", idempotent=True, raw=True
            )
        mime = ref.mime_type or response.headers.get("content-type", "").split(";")[0]
        return FetchedFile(data=response.content, name=ref.name, mime_type=mime)

    # -- outbound -------------------------------------------------------------------------------
    def _send_path(self, room_id: str, event_type: str, txn: str) -> str:
        if not room_id.startswith("!"):
            raise PlatformAPIError(f"not a Matrix room id: {room_id[:100]!r}")
        return f"{CLIENT}/rooms/{quote(room_id, safe='')}/send/{event_type}/{txn}"

    async def _send(self, room_id: str, event_type: str, content: dict[str, Any], *, txn: str | None) -> str:
        # With a derived transaction id the homeserver makes a repeated PUT the same event: the send is
        # safe to repeat even when its answer was lost.
        path = self._send_path(room_id, event_type, txn or f"lb-{uuid.uuid4().hex}")
        sent = _obj(await self.request("PUT", path, idempotent=txn is not None, json=content))
        return str(sent.get("event_id") or "")

    def _txn(self, *parts: str) -> str:
        return "lb-" + hashlib.sha256(chr(31).join((self.bot_id, *parts)).encode()).hexdigest()[:40]

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if target.reply_to_message_id:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": target.reply_to_message_id}}
        answers = target.reply_to_message_id or str(target.extra.get("answers") or "")
        txn = self._txn("send", target.chat_id, answers, text) if answers else None
        event_id = await self._send(target.chat_id, "m.room.message", content, txn=txn)
        return SentMessage(chat_id=target.chat_id, message_id=event_id)

    async def edit_text(self, message: SentMessage, text: str) -> None:
        content = {
            "msgtype": "m.text",
            "body": f"* {text}",
            "m.new_content": {"msgtype": "m.text", "body": text},
            "m.relates_to": {"rel_type": "m.replace", "event_id": message.message_id},
        }
        txn = self._txn("edit", message.chat_id, message.message_id, text)
        await self._send(message.chat_id, "m.room.message", content, txn=txn)

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": message.message_id, "key": reaction}}
        await self._send(message.chat_id, "m.reaction", content, txn=self._txn("react", message.message_id, reaction))

    async def identity(self) -> str:
        found = _obj(await self.request("GET", f"{CLIENT}/account/whoami", idempotent=True))
        return f"the homeserver knows this bot as {found.get('user_id') or '?'}"

    async def webhook_register(self, url: str) -> str:
        return f"{await self.identity()}: Matrix events are read by the bot's sync (the connector process)"


def _strip_own_name(text: str, own_user_id: str) -> str:
    """The text without a leading mention of the bot (`@langbot:example.org: hi`, `langbot: hi`)."""
    localpart = own_user_id[1:].split(":", 1)[0] if own_user_id.startswith("@") else ""
    for prefix in (own_user_id, localpart):
        if prefix and text.lower().startswith(prefix.lower()):
            rest = text[len(prefix) :]
            if not rest or rest[0] in ":, \n":
                return rest.lstrip(":, \n")
    return text


def _event_time(value: Any) -> float:
    try:
        return float(value) / 1000
    except (TypeError, ValueError):
        return time.time()


# The filter of every sync: only what a bot reads, and a first sync with no history.
_FILTER: dict[str, Any] = {
    "presence": {"types": []},
    "account_data": {"types": []},
    "room": {
        "timeline": {"limit": 50},
        "state": {"lazy_load_members": True},
        "ephemeral": {"types": []},
        "account_data": {"types": []},
    },
}
_FIRST_FILTER: dict[str, Any] = {**_FILTER, "room": {**_FILTER["room"], "timeline": {"limit": 0}}}


class MatrixConnector(PlatformConnector):
    """The bot's sync loop: long-polls `/sync` from the stored `since` token, joins invited rooms, hands
    each timeline event of a joined room to `on_update`, and stores the batch's `next_batch` once they
    are handed on. A failed poll is retried after the backoff from the same token."""

    adapter: MatrixAdapter
    reconnect_first_delay: ClassVar[float] = 1.0
    poll_timeout_ms: ClassVar[int] = 30000
    fatal_retry_delay: ClassVar[float] = 300.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.since = ""
        self.user_id = ""
        self.polls = 0
        self._members: dict[str, int] = {}

    async def run(self) -> None:
        delays = self.backoff_delays(self.reconnect_first_delay)
        try:
            while True:
                if self.state != "connected":
                    self.state, self.detail = "connecting", ""
                try:
                    await self._sync_forever()
                    detail = "the sync ended"
                except MatrixUnauthorizedError as exc:
                    self.state, self.detail = "error", str(exc)
                    logger.error("matrix bot %s: %s", self.adapter.bot_id, exc)
                    await self.adapter.aclose()
                    await asyncio.sleep(self.fatal_retry_delay)
                    continue
                except (OSError, TimeoutError, PlatformAPIError, ValueError) as exc:
                    detail = f"{type(exc).__name__}: {exc}"
                if self.state == "connected":
                    delays = self.backoff_delays(self.reconnect_first_delay)
                delay = next(delays)
                logger.warning("matrix bot %s: %s; polling again in %.1fs", self.adapter.bot_id, detail, delay)
                await self.sleep_backoff(delay, detail)
        finally:
            self.state = "stopped"
            await self.adapter.aclose()

    async def _cursor(self, value: str | None = None) -> str:
        adapter = self.adapter
        if value is None:
            return await cursor_get(adapter.platform, adapter.bot_id, adapter.credentials, CURSOR)
        await cursor_set(adapter.platform, adapter.bot_id, adapter.credentials, CURSOR, value)
        return value

    async def _sync(self, *, first: bool) -> dict[str, Any]:
        self.polls += 1
        params: dict[str, Any] = {"filter": json.dumps(_FIRST_FILTER if first else _FILTER, separators=(",", ":"))}
        if not first:
            params |= {"since": self.since, "timeout": self.poll_timeout_ms}
        answer = await self.adapter.request(
            "GET",
            f"{CLIENT}/sync",
            idempotent=True,
            params=params,
            timeout=REQUEST_TIMEOUT + self.poll_timeout_ms / 1000,
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("next_batch"), str):
            raise ValueError("the sync answer has no next_batch")
        return answer

    async def _sync_forever(self) -> None:
        if not self.user_id:
            self.user_id = await self.adapter.whoami()
            if not self.user_id:
                raise ValueError("the homeserver did not say who the bot is")
        if not self.since:
            self.since = await self._cursor()
        if not self.since:
            # A bot's first sync: no history is answered, only invitations are taken up.
            answer = await self._sync(first=True)
            await self._handle(answer, history=False)
            self.since = await self._cursor(answer["next_batch"])
        self.state, self.detail = "connected", ""
        while True:
            answer = await self._sync(first=False)
            self.state, self.detail = "connected", ""
            await self._handle(answer, history=True)
            if answer["next_batch"] != self.since:
                # Stored once the batch's events are handed on: a restart starts after them.
                self.since = await self._cursor(answer["next_batch"])

    async def _handle(self, answer: dict[str, Any], *, history: bool) -> None:
        rooms = _obj(answer.get("rooms"))
        for room_id, room in _obj(rooms.get("invite")).items():
            await self._accept_invite(str(room_id), _obj(room))
        if not history:
            return
        for room_id, room in _obj(rooms.get("join")).items():
            room = _obj(room)
            count = _obj(room.get("summary")).get("m.joined_member_count")
            if isinstance(count, int):
                self._members[str(room_id)] = count
            for event in _obj(room.get("timeline")).get("events") or ():
                if isinstance(event, dict):
                    await self._event(str(room_id), event)

    async def _accept_invite(self, room_id: str, room: dict[str, Any]) -> None:
        inviter = ""
        for event in _obj(room.get("invite_state")).get("events") or ():
            event = _obj(event)
            if event.get("type") == "m.room.member" and event.get("state_key") == self.user_id:
                inviter = str(event.get("sender") or "")
        try:
            await self.adapter.request("POST", f"{CLIENT}/join/{quote(room_id, safe='')}", idempotent=True, json={})
        except MatrixUnauthorizedError:
            raise
        except PlatformAPIError as exc:
            logger.warning(
                "matrix bot %s: the invitation to %s could not be accepted: %s", self.adapter.bot_id, room_id, exc
            )
            return
        update = event_update(
            event_id=_event_id(self.adapter.bot_id, "invite", room_id, self.since),
            event_type="bot.added",
            source_event_type="m.room.member:invite",
            chat_id=room_id,
            chat_type="group",
            actor_id=inviter or "unknown",
            reply_target=ReplyTarget(chat_id=room_id),
        )
        await self._hand_on(update)

    async def _group(self, room_id: str) -> bool:
        if room_id not in self._members:
            try:
                found = _obj(
                    await self.adapter.request(
                        "GET", f"{CLIENT}/rooms/{quote(room_id, safe='')}/joined_members", idempotent=True
                    )
                )
                self._members[room_id] = len(_obj(found.get("joined")))
            except MatrixUnauthorizedError:
                raise
            except PlatformAPIError:
                return True  # unknown: the safer reading (answer only when mentioned)
        return self._members[room_id] > 2

    async def _event(self, room_id: str, event: dict[str, Any]) -> None:
        if event.get("type") == "m.room.member":
            self._members.pop(room_id, None)  # asked again when next needed
        try:
            group = await self._group(room_id)
            update = self.adapter.room_event_update(room_id, event, own_user_id=self.user_id, group=group)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            logger.warning("matrix bot %s: an event of the wrong shape was ignored (%s)", self.adapter.bot_id, exc)
            return
        if update is not None:
            await self._hand_on(update)

    async def _hand_on(self, update: InboundUpdate) -> None:
        try:
            await self.on_update(update)
        except Exception:
            # One event that cannot become a gateway event must not stop the bot's sync.
            logger.exception("matrix bot %s: an event could not be accepted", self.adapter.bot_id)


MatrixAdapter.connector_class = MatrixConnector
