"""A fake Mattermost server speaking the REST API v4's wire format, every call with `Authorization: Bearer
<bot token>` (401 `{"id": "api.context.session_expired.app_error", ...}` otherwise):

* `GET /api/v4/users/me` → the bot's user (`{"id", "username", "is_bot": true}`);
* `POST /api/v4/posts` (`{"channel_id", "message", "root_id"?, "file_ids"?}`) → 201 with the post (`id` a
  26-character id); a message over 16,383 characters answers 400, an unknown channel 403;
* `PUT /api/v4/posts/{id}/patch` (`{"message"}`) → 200 with the post; a post the bot did not write 403;
* `POST /api/v4/reactions` (`{"user_id", "post_id", "emoji_name"}`) → 201; a `user_id` not the bot's 403;
* `POST /api/v4/files` (multipart: `channel_id`, `files`) → 201 `{"file_infos": [{"id", "name", ...}]}`;
* `GET /api/v4/files/{id}` and `/files/{id}/info` for files a test added (`add_file`).

Rate limiting: `limit_next(n)` answers the next n writes 429 with `X-Ratelimit-Reset: 1` and `Retry-After`.

It builds outgoing-webhook bodies as Mattermost posts them (`outgoing`: the form or JSON fields `token`,
`team_id`, `team_domain`, `channel_id`, `channel_name`, `timestamp` (ms), `user_id`, `user_name`,
`post_id`, `text`, `trigger_word`, `file_ids` comma-separated) and keeps every post as it now reads
(`posts`) with its edits (`edits`).
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

BOT_TOKEN = "fake-mattermost-bot-token-0123456789"
WEBHOOK_TOKEN = "fakeoutgoingwebhooktoken01"
BOT_USER_ID = "b0tuser0000000000000000000"
BOT_USERNAME = "langbot"
TEAM_ID = "team0000000000000000000000"
CHANNEL_ID = "chan0000000000000000000000"


def new_id() -> str:
    return secrets.token_hex(13)  # 26 lower-case hex characters, shaped as Mattermost's ids


@dataclass
class Post:
    id: str
    channel_id: str
    message: str
    root_id: str = ""
    file_ids: list[str] = field(default_factory=list)
    edits: int = 0


class FakeMattermost(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(MattermostHandler)
        self.lock = threading.Lock()
        self.posts: dict[str, Post] = {}
        self.order: list[str] = []
        self.reactions: list[tuple[str, str, str]] = []  # (user_id, post_id, emoji)
        self.uploads: dict[str, tuple[str, str, bytes]] = {}  # id -> (name, mime, data)
        self.files: dict[str, tuple[str, str, bytes]] = {}
        self.channels = {CHANNEL_ID}
        self.calls: list[tuple[str, int]] = []
        self.limited = 0

    def limit_next(self, count: int = 1) -> None:
        with self.lock:
            self.limited += count

    def add_file(self, name: str, mime: str, data: bytes) -> str:
        file_id = new_id()
        self.files[file_id] = (name, mime, data)
        return file_id

    @staticmethod
    def outgoing(
        text: str,
        *,
        token: str = WEBHOOK_TOKEN,
        user_id: str = "user0000000000000000000ada",
        user_name: str = "ada",
        channel_id: str = CHANNEL_ID,
        trigger_word: str = "",
        file_ids: list[str] | None = None,
        post_id: str | None = None,
        as_json: bool = False,
    ) -> tuple[bytes, str]:
        """An outgoing webhook's body and content type."""
        fields = {
            "token": token,
            "team_id": TEAM_ID,
            "team_domain": "langbot",
            "channel_id": channel_id,
            "channel_name": "town-square",
            "timestamp": str(int(time.time() * 1000)),
            "user_id": user_id,
            "user_name": user_name,
            "post_id": post_id or new_id(),
            "text": text,
            "trigger_word": trigger_word,
            "file_ids": ",".join(file_ids or []),
        }
        if as_json:
            return json.dumps(fields).encode(), "application/json"
        return urlencode(fields).encode(), "application/x-www-form-urlencoded"

    def channel_posts(self, channel: str = CHANNEL_ID) -> list[Post]:
        with self.lock:
            return [self.posts[p] for p in self.order if self.posts[p].channel_id == channel]


PATCH = re.compile(r"^/api/v4/posts/([a-z0-9]{26})/patch$")
FILE = re.compile(r"^/api/v4/files/([a-z0-9]{26})(/info)?$")


class MattermostHandler(PlatformHandler):
    fake: FakeMattermost

    def _answer(self, status: int, body: Any, route: str) -> None:
        with self.fake.lock:
            self.fake.calls.append((route, status))
        self.send_json(status, body)

    def _error(self, status: int, error_id: str, message: str, route: str) -> None:
        self._answer(status, {"id": error_id, "message": message, "status_code": status}, route)

    def _authorised(self, route: str) -> bool:
        if self.headers.get("authorization") == f"Bearer {BOT_TOKEN}":
            return True
        self._error(401, "api.context.session_expired.app_error", "Invalid or expired session.", route)
        return False

    def _limited(self, route: str) -> bool:
        with self.fake.lock:
            if not self.fake.limited:
                return False
            self.fake.limited -= 1
            self.fake.calls.append((route, 429))
        data = json.dumps({"id": "api.context.rate_limit", "message": "Too many requests"}).encode()
        self.send_response(429)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Ratelimit-Reset", "1")
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return True

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        if not self._authorised("get"):
            return
        if self.path_only == "/api/v4/users/me":
            self._answer(200, {"id": BOT_USER_ID, "username": BOT_USERNAME, "is_bot": True}, "users/me")
            return
        found = FILE.match(self.path_only)
        item = self.fake.files.get(found.group(1)) if found else None
        if found is None or item is None:
            self._error(404, "app.file_info.get.app_error", "Unable to get the file info.", "file")
            return
        if found.group(2):
            info = {"id": found.group(1), "name": item[0], "mime_type": item[1], "size": len(item[2])}
            self._answer(200, info, "file info")
            return
        with self.fake.lock:
            self.fake.calls.append(("file", 200))
        self.send_bytes(200, item[1], item[2])

    def do_PUT(self) -> None:  # noqa: N802 (http.server names it)
        raw = self.read_body()
        found = PATCH.match(self.path_only)
        if found is None:
            self._error(404, "api.context.404.app_error", "Sorry, we could not find the page.", "?")
            return
        if not self._authorised("patch") or self._limited("patch"):
            return
        message = json.loads(raw or b"{}").get("message")
        with self.fake.lock:
            post = self.fake.posts.get(found.group(1))
            if post is not None and isinstance(message, str) and len(message) <= 16383:
                post.message = message
                post.edits += 1
        if post is None:
            self._error(
                403, "api.context.permissions.app_error", "You do not have the appropriate permissions.", "patch"
            )
            return
        if not isinstance(message, str) or len(message) > 16383:
            self._error(400, "model.post.is_valid.message_length.app_error", "Invalid Message property.", "patch")
            return
        self._answer(200, {"id": post.id, "channel_id": post.channel_id, "message": post.message}, "patch")

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        route = {"/api/v4/posts": "post", "/api/v4/reactions": "reaction", "/api/v4/files": "upload"}.get(
            self.path_only
        )
        if route is None:
            self._error(404, "api.context.404.app_error", "Sorry, we could not find the page.", "?")
            return
        if not self._authorised(route) or self._limited(route):
            return
        if route == "upload":
            parts = self.form_parts(raw)
            channel = parts["channel_id"].get_content().strip() if "channel_id" in parts else ""
            upload = parts.get("files")
            if upload is None or channel not in fake.channels:
                self._error(400, "api.file.upload_file.bad_request", "Bad request.", route)
                return
            payload = upload.get_payload(decode=True)
            file_id = new_id()
            with fake.lock:
                fake.uploads[file_id] = (
                    upload.get_filename() or "file",
                    upload.get_content_type(),
                    payload if isinstance(payload, bytes) else b"",
                )
            info = {"id": file_id, "name": upload.get_filename(), "mime_type": upload.get_content_type()}
            self._answer(201, {"file_infos": [info], "client_ids": []}, route)
            return
        body = json.loads(raw or b"{}")
        if route == "reaction":
            if body.get("user_id") != BOT_USER_ID or body.get("post_id") not in fake.posts:
                self._error(403, "api.context.permissions.app_error", "You do not have the permissions.", route)
                return
            with fake.lock:
                fake.reactions.append((body["user_id"], body["post_id"], str(body.get("emoji_name"))))
            self._answer(201, {**body, "create_at": int(time.time() * 1000)}, route)
            return
        message, channel = body.get("message"), body.get("channel_id")
        file_ids = body.get("file_ids") or []
        if channel not in fake.channels:
            self._error(403, "api.context.permissions.app_error", "You do not have the permissions.", route)
            return
        if not isinstance(message, str) or len(message) > 16383 or (not message and not file_ids):
            self._error(400, "model.post.is_valid.msg.app_error", "Invalid Message property.", route)
            return
        if any(f not in fake.uploads for f in file_ids):
            self._error(400, "api.post.create_post.bad_file_ids", "Invalid file ids.", route)
            return
        post = Post(new_id(), channel, message, str(body.get("root_id") or ""), list(file_ids))
        with fake.lock:
            fake.posts[post.id] = post
            fake.order.append(post.id)
        self._answer(201, {"id": post.id, "channel_id": channel, "message": message, "root_id": post.root_id}, route)
