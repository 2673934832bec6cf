"""Mattermost, on httpx against the REST API v4: an outgoing webhook in (Mattermost posts a channel's
messages, or those starting with its trigger words, as a form or JSON carrying the webhook's `token`,
checked here), a bot account out (`POST /api/v4/posts`, streamed by editing the post with
`PUT /api/v4/posts/{id}/patch`, reactions with `POST /api/v4/reactions`, files with `POST /api/v4/files`
then a post naming them; files in with `GET /api/v4/files/{id}`), on the bot's access token.

Credentials: `server_url` (the Mattermost server's address, e.g. `https://chat.example.com`), `bot_token`
(a bot account's access token: System Console → Integrations → Bot Accounts, or a user's personal access
token), `webhook_token` (the token Mattermost shows for the outgoing webhook: Integrations → Outgoing
Webhooks); `bot_user_id` and `bot_username` are filled by the admin's "Set the platform webhook" (the
bot's own posts are ignored; a message that @-mentions the bot says so). `api_base_url`, when set, is used
instead of `server_url` (a proxy).

Mattermost sends outgoing webhooks for public channels only, so direct messages and private channels do not
reach the bot (that needs the bot's WebSocket, not built). Every message is a channel's: `data.chat_type` is
`group`, and `data.mentioned` says whether it begins with a trigger word or @-mentions the bot.
"""

from __future__ import annotations

import hmac
import time
from typing import Any, ClassVar
from urllib.parse import parse_qs

import httpx

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
    transport_failure,
)

REQUEST_TIMEOUT = 30.0
ID_LENGTH = 26  # Mattermost's ids: 26 lower-case letters and digits
MAX_FILE_IDS = 10  # what one post may carry


def _is_id(value: str) -> bool:
    return len(value) == ID_LENGTH and value.isascii() and value.isalnum()


class MattermostAdapter(PlatformAdapter):
    platform: ClassVar[str] = "mattermost"
    # A post holds 16,383 characters on a default server; edits are cheap, once a second per channel.
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        edit=True,
        reaction=True,
        files_in=True,
        files_out=True,
        threads=True,
        max_message_chars=16383,
        edit_interval_seconds=1.0,
        max_file_bytes=100 * 1024 * 1024,
    )
    credential_keys: ClassVar[tuple[str, ...]] = (
        "server_url",
        "bot_token",
        "webhook_token",
        "bot_user_id",
        "bot_username",
        "api_base_url",
    )
    credential_schema: ClassVar[tuple[CredentialField, ...]] = (
        CredentialField(
            "server_url",
            required=True,
            help="The Mattermost server's address, e.g. https://chat.example.com.",
        ),
        CredentialField(
            "bot_token",
            required=True,
            secret=True,
            help="The bot account's access token: System Console → Integrations → Bot Accounts → the bot → "
            "Create New Token (or a user's personal access token).",
        ),
        CredentialField(
            "webhook_token",
            required=True,
            secret=True,
            help="The outgoing webhook's token: the team's Integrations → Outgoing Webhooks → the webhook "
            "whose callback URL is this bot's webhook address.",
        ),
        CredentialField("bot_user_id", help="Filled by Set the platform webhook: the bot's own user id."),
        CredentialField("bot_username", help="Filled by Set the platform webhook: the bot's @name."),
        CredentialField("api_base_url", help="Optional: used instead of server_url (a proxy)."),
    )

    _http: httpx.AsyncClient | None = None
    _me: dict[str, Any] | None = None

    def _secret(self, key: str) -> str:
        return str(self.credentials.get(key) or "").strip()

    @property
    def base_url(self) -> str:
        base = self.api_base_url or self._secret("server_url").rstrip("/")
        if not base.startswith(("https://", "http://")):
            raise PlatformAPIError("the bot has no Mattermost server_url (https://…)")
        return base

    # -- inbound --------------------------------------------------------------------------------
    def _fields(self, request: InboundRequest) -> dict[str, Any]:
        """The webhook's fields, from the JSON or form body Mattermost sends (the webhook's content type)."""
        if request.header("content-type").split(";")[0].strip().lower() == "application/json":
            return inbound_json_object(request.body, what="not a Mattermost outgoing webhook")
        try:
            text = request.body.decode("utf-8")
            form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=64)
        except ValueError:  # not UTF-8, not a form, too many fields
            raise InboundRefusedError("malformed", "not a Mattermost outgoing webhook", status=400) from None
        return {name: values[0] for name, values in form.items()}

    def verify(self, request: InboundRequest) -> None:
        expected = self._secret("webhook_token")
        if not expected:
            raise InboundRefusedError("forged", "the bot has no webhook_token; copy it from the outgoing webhook")
        given = self._fields(request).get("token")
        if not isinstance(given, str) or not given:
            raise InboundRefusedError("forged", "the webhook carries no token", status=401)
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise InboundRefusedError("forged", "the webhook token does not match", status=403)

    def parse(self, request: InboundRequest) -> InboundBatch:
        fields = self._fields(request)
        with malformed_unless_shaped("not a Mattermost outgoing webhook"):
            update = self._update(fields)
        return InboundBatch(updates=[update] if update is not None else [])

    def _update(self, fields: dict[str, Any]) -> InboundUpdate | None:
        post_id = str(fields["post_id"])
        channel = str(fields["channel_id"])
        user = str(fields.get("user_id") or "")
        if not _is_id(post_id) or not _is_id(channel):
            raise ValueError("post_id or channel_id")
        if user and user == self._secret("bot_user_id"):
            return None  # the bot's own post (a channel-wide webhook sees it too)
        text = str(fields.get("text") or "")
        file_ids = [f for f in str(fields.get("file_ids") or "").split(",") if _is_id(f)][:MAX_FILE_IDS]
        if not text.strip() and not file_ids:
            return None
        username = self._secret("bot_username")
        mentioned = bool(fields.get("trigger_word")) or bool(username and f"@{username}" in text)
        files = [PlatformFileRef(ref={"file_id": f}, name=f"file-{f}", kind="file") for f in file_ids]
        target = ReplyTarget(chat_id=channel, reply_to_message_id=post_id)
        try:
            event_time = float(str(fields.get("timestamp") or "")) / 1000
        except ValueError:  # none given, or not a number
            event_time = time.time()
        return InboundUpdate(
            envelope={
                "event_id": f"mattermost:{self.bot_id}:{post_id}",
                "event_type": "message.received",
                "source_event_type": "outgoing_webhook",
                "actor": {
                    "actor_type": "user",
                    "actor_id": user or "unknown",
                    "actor_name": str(fields.get("user_name") or user)[:255],
                },
                "subject": {"subject_type": "message", "subject_id": post_id, "data": {"chat_type": "group"}},
                "input": {"text": text.strip() or None},
                "data": {
                    "chat_id": channel,
                    "chat_type": "group",
                    "mentioned": mentioned,
                    "channel_name": str(fields.get("channel_name") or ""),
                    "team_id": str(fields.get("team_id") or ""),
                    "reply_target": target.as_data(),
                    # The webhook's token is left out of what is stored with the event.
                    "raw": {k: v for k, v in fields.items() if k != "token"},
                },
                "event_time": event_time,
            },
            files=files,
        )

    # -- HTTP -----------------------------------------------------------------------------------
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            if not self._secret("bot_token"):
                raise PlatformAPIError("the bot has no Mattermost bot_token")
            self._http = httpx.AsyncClient(
                headers={"Authorization": f"Bearer {self._secret('bot_token')}"},
                transport=guarded_async_transport(allow_private=self.allow_private),
                trust_env=False,
                timeout=REQUEST_TIMEOUT,
                follow_redirects=False,
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def _call(self, what: str, method: str, path: str, *, idempotent: bool = False, **kwargs: Any) -> Any:
        try:
            response = await self.http().request(method, f"{self.base_url}/api/v4{path}", **kwargs)
        except AddressRefusedError as exc:
            raise PlatformAPIError(f"Mattermost {what}: refused: {exc}") from exc
        except httpx.HTTPError as exc:
            error = transport_failure(f"Mattermost {what}: {exc}", exc)
            error.outcome_unknown = error.outcome_unknown and not idempotent
            raise error from exc
        if response.status_code == 429:
            raise PlatformAPIError(f"Mattermost {what}: rate limited", retry_after=_retry_after(response))
        if response.status_code >= 400:
            raise PlatformAPIError(
                f"Mattermost {what}: HTTP {response.status_code}: {_message_of(response)}",
                retryable=response.status_code >= 500,
                outcome_unknown=response.status_code >= 500 and not idempotent,
            )
        if what == "file":
            return response
        try:
            return response.json()
        except ValueError:
            return {}

    async def me(self) -> dict[str, Any]:
        """The bot's own user (`GET /api/v4/users/me`), asked once per adapter."""
        if self._me is None:
            found = await self._call("users/me", "GET", "/users/me", idempotent=True)
            self._me = found if isinstance(found, dict) else {}
        return self._me

    # -- files in -------------------------------------------------------------------------------
    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        file_id = str(ref.ref.get("file_id") or "")
        if not _is_id(file_id):
            raise PlatformAPIError("the file reference has no Mattermost file id")
        info = await self._call("file info", "GET", f"/files/{file_id}/info", idempotent=True)
        response = await self._call("file", "GET", f"/files/{file_id}", idempotent=True)
        info = info if isinstance(info, dict) else {}
        mime_type = str(info.get("mime_type") or response.headers.get("content-type", "").split(";")[0])
        name = str(info.get("name") or ref.name)[:200]
        return FetchedFile(data=response.content, name=name, mime_type=mime_type)

    # -- outbound -------------------------------------------------------------------------------
    def _post(self, target: ReplyTarget, message: str) -> dict[str, Any]:
        if not _is_id(target.chat_id):
            raise PlatformAPIError(f"not a Mattermost channel id: {target.chat_id!r}")
        post: dict[str, Any] = {"channel_id": target.chat_id, "message": message}
        if target.thread_id and _is_id(target.thread_id):
            post["root_id"] = target.thread_id
        return post

    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage:
        sent = await self._call("create post", "POST", "/posts", json=self._post(target, text))
        return SentMessage(chat_id=target.chat_id, message_id=str(sent.get("id") or ""))

    async def edit_text(self, message: SentMessage, text: str) -> None:
        if not _is_id(message.message_id):
            raise PlatformAPIError("not a Mattermost post id")
        await self._call(
            "patch post", "PUT", f"/posts/{message.message_id}/patch", idempotent=True, json={"message": text}
        )

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        post = self._post(target, file.caption)
        uploaded = await self._call(
            "upload file",
            "POST",
            "/files",
            data={"channel_id": target.chat_id},
            files={"files": (file.name, file.data, file.mime_type or "application/octet-stream")},
        )
        infos = uploaded.get("file_infos") if isinstance(uploaded, dict) else None
        if not isinstance(infos, list) or not infos or not isinstance(infos[0], dict) or not infos[0].get("id"):
            raise PlatformAPIError("Mattermost upload file: no file id in the answer")
        post["file_ids"] = [str(infos[0]["id"])]
        sent = await self._call("create post", "POST", "/posts", json=post)
        return SentMessage(chat_id=target.chat_id, message_id=str(sent.get("id") or ""))

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        user_id = self._secret("bot_user_id") or str((await self.me()).get("id") or "")
        if not _is_id(message.message_id) or not user_id:
            raise PlatformAPIError("Mattermost reaction: no post or bot user id")
        body = {"user_id": user_id, "post_id": message.message_id, "emoji_name": reaction.strip(":")}
        # Reacting twice with one emoji leaves one reaction: safe to repeat.
        await self._call("add reaction", "POST", "/reactions", idempotent=True, json=body)

    async def identity(self) -> str:
        me = await self.me()
        return f"Mattermost knows this bot as @{me.get('username') or '?'} (id {me.get('id') or '?'})"

    async def webhook_register(self, url: str) -> str:
        """Mattermost takes outgoing webhooks only on its own pages: this checks the token, keeps the bot's
        user id and @name (its own posts are ignored, @-mentions of it noticed) and says what to paste."""
        me = await self.me()
        if me.get("id"):
            self.credentials["bot_user_id"] = str(me["id"])
        if me.get("username"):
            self.credentials["bot_username"] = str(me["username"])
        return (
            f"@{me.get('username') or '?'}: in the team's Integrations → Outgoing Webhooks, add one with {url} as "
            "its callback URL and copy its token into webhook_token"
        )


def _message_of(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("message") or body.get("id") or "")[:200] if isinstance(body, dict) else ""


def _retry_after(response: httpx.Response) -> float:
    for header in ("retry-after", "x-ratelimit-reset"):
        try:
            return max(1.0, float(response.headers.get(header) or ""))
        except ValueError:
            continue
    return 1.0
