"""A fake DingTalk OpenAPI speaking its wire format: `POST /v1.0/oauth2/accessToken` sells access tokens
(`{"accessToken", "expireIn"}`); the robot routes (`/v1.0/robot/groupMessages/send`,
`/v1.0/robot/oToMessages/batchSend`, `/v1.0/robot/messageFiles/download`) take
`x-acs-dingtalk-access-token` and answer their JSON or DingTalk's error body (`{"code", "message"}`, HTTP
400/401); `POST /media/upload?access_token=&type=` (the older API) answers `{"errcode", "media_id"}`; session
webhooks (`POST /robot/sendBySession?session=...`) answer `{"errcode": 0, "errmsg": "ok"}`; download URLs
serve the files a test added. The Stream mode's `POST /v1.0/gateway/connections/open` checks the app's
client id and secret and answers the endpoint of the fake stream gateway a test attached
(`tests/fakes/dingtalk_stream.py`) with a fresh ticket; the AI card routes (`POST
/v1.0/card/instances/createAndDeliver`, `PUT /v1.0/card/streaming`) keep each card's updates (`cards`).

It records what each chat was sent (`sent`) and every call (`calls`), expires tokens on demand, and builds
robot messages as DingTalk posts them to the HTTP callback, with the `timestamp` and `sign` headers.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler

CLIENT_ID = "dingabcdefghijklmnop"
CLIENT_SECRET = "fake-client-secret-0123456789abcdef"
CORP_ID = "ding0123456789corp"
ROBOT_USER_ID = "$:LWCP_v1:$robot000000"


def sign_headers(secret: str = CLIENT_SECRET, *, timestamp_ms: int | None = None) -> dict[str, str]:
    """The headers DingTalk signs a callback with: `timestamp` (ms) and `sign`, Base64 of
    HMAC-SHA256(secret, timestamp + "\\n" + secret)."""
    stamp = str(timestamp_ms if timestamp_ms is not None else int(time.time() * 1000))
    digest = hmac.new(secret.encode(), f"{stamp}\n{secret}".encode(), hashlib.sha256).digest()
    return {"timestamp": stamp, "sign": base64.b64encode(digest).decode()}


@dataclass
class Call:
    route: str
    body: dict[str, Any]
    query: dict[str, str] = field(default_factory=dict)
    at: float = 0.0
    status: int = 200


@dataclass
class Sent:
    """One message the robot sent: where (`conversation` or `user`), how, what."""

    route: str
    where: str
    msg_key: str
    params: dict[str, Any]
    at_users: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return str(self.params.get("text") or self.params.get("content") or "")


@dataclass
class Card:
    """An AI card the robot created: where it went, with which template, and each streaming update."""

    template_id: str
    space: str
    deliver: dict[str, Any]
    updates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def contents(self) -> list[str]:
        return [str(u.get("content") or "") for u in self.updates]

    @property
    def finished(self) -> bool:
        return bool(self.updates) and bool(self.updates[-1].get("isFinalize"))


class FakeDingTalk(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(DingTalkHandler)
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.sent: list[Sent] = []
        self.tokens: set[str] = set()
        self.sessions: dict[str, str] = {}  # session -> where its messages land
        self.files: dict[str, tuple[str, bytes]] = {}  # download code -> (content type, bytes)
        self.uploads: dict[str, tuple[str, bytes]] = {}  # media id -> (name, bytes)
        self.stream_endpoint = ""  # the fake stream gateway's ws:// URL, when a test attached one
        self.tickets: list[str] = []  # tickets connections/open handed out, in order
        self.cards: dict[str, Card] = {}  # out track id -> the card as created and streamed
        self._ids = itertools.count(1)

    # -- what a test sets up ---------------------------------------------------------------------
    def expire_tokens(self) -> None:
        """Every token sold so far is refused from now on (as after its two hours)."""
        with self.lock:
            self.tokens.clear()

    def add_file(self, download_code: str, content_type: str, data: bytes) -> None:
        self.files[download_code] = (content_type, data)

    def robot_message(
        self,
        text: str | None = "hello",
        *,
        group: bool = False,
        conversation_id: str | None = None,
        staff_id: str = "staff-ada",
        nick: str = "Ada",
        msg_id: str | None = None,
        msgtype: str = "text",
        content: dict[str, Any] | None = None,
        session_expires_in: float = 5400.0,
    ) -> dict[str, Any]:
        """A message as DingTalk posts it to the robot's HTTP callback, with a live session webhook here."""
        number = next(self._ids)
        conversation = conversation_id or (f"cidGroup{number:06d}==" if group else f"cidSingle{staff_id}==")
        session = f"s{number:06d}"
        self.sessions[session] = conversation
        now_ms = int(time.time() * 1000)
        message: dict[str, Any] = {
            "conversationId": conversation,
            "chatbotCorpId": CORP_ID,
            "chatbotUserId": ROBOT_USER_ID,
            "msgId": msg_id or f"msg{number:010d}",
            "senderNick": nick,
            "isAdmin": False,
            "senderStaffId": staff_id,
            "sessionWebhookExpiredTime": now_ms + int(session_expires_in * 1000),
            "createAt": now_ms,
            "senderCorpId": CORP_ID,
            "conversationType": "2" if group else "1",
            "senderId": f"$:LWCP_v1:${staff_id}",
            "sessionWebhook": f"{self.origin}/robot/sendBySession?session={session}",
            "robotCode": CLIENT_ID,
            "msgtype": msgtype,
        }
        if group:
            message.update(conversationTitle="Team", isInAtList=True, atUsers=[{"dingtalkId": ROBOT_USER_ID}])
        if msgtype == "text":
            message["text"] = {"content": f" {text}" if group else text}
        else:
            message["content"] = content or {}
        return message

    # -- what a test reads -----------------------------------------------------------------------
    def calls_of(self, *routes: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.route in routes]

    def texts(self, where: str) -> list[str]:
        with self.lock:
            return [s.text for s in self.sent if s.where == where]


class DingTalkHandler(PlatformHandler):
    fake: FakeDingTalk

    def do_PUT(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        try:
            body = json.loads(self.read_body() or b"{}")
        except ValueError:
            self.send_json(400, {"code": "InvalidParameter", "message": "body is not JSON"})
            return
        if self.path_only != "/v1.0/card/streaming":
            self.send_json(404, {"code": "NotFound", "message": "no such route"})
            return
        with fake.lock:
            authorized = self.headers.get("x-acs-dingtalk-access-token") in fake.tokens
            fake.calls.append(Call("card.streaming", body, at=time.monotonic(), status=200 if authorized else 401))
            if not authorized:
                self.send_json(401, {"code": "InvalidAuthentication", "message": "不合法的access_token"})
                return
            card = fake.cards.get(str(body.get("outTrackId") or ""))
            if card is None:
                self.send_json(400, {"code": "param.cardNotExist", "message": "卡片不存在"})
                return
            if card.finished:
                self.send_json(400, {"code": "param.cardFinished", "message": "卡片已结束"})
                return
            if not body.get("guid") or not body.get("key") or "isFull" not in body:
                self.send_json(400, {"code": "InvalidParameter", "message": "guid, key and isFull are required"})
                return
            card.updates.append(body)
        self.send_json(200, {"success": True, "result": True})

    def _open_connection(self, body: dict[str, Any]) -> None:
        fake = self.fake
        with fake.lock:
            fake.calls.append(Call("connections.open", body, at=time.monotonic()))
            if (body.get("clientId"), body.get("clientSecret")) != (CLIENT_ID, CLIENT_SECRET):
                self.send_json(401, {"code": "invalidClientIdOrSecret", "message": "无效的clientId或者clientSecret"})
                return
            topics = {s.get("topic") for s in body.get("subscriptions") or [] if isinstance(s, dict)}
            if not topics or not fake.stream_endpoint:
                self.send_json(400, {"code": "InvalidParameter", "message": "no subscriptions"})
                return
            ticket = f"ticket-{next(fake._ids):06d}"
            fake.tickets.append(ticket)
        self.send_json(200, {"endpoint": fake.stream_endpoint, "ticket": ticket})

    def _card_deliver(self, body: dict[str, Any]) -> None:
        fake = self.fake
        track = str(body.get("outTrackId") or "")
        space = str(body.get("openSpaceId") or "")
        if not track or not body.get("cardTemplateId") or not space.startswith("dtv1.card//"):
            self.send_json(400, {"code": "InvalidParameter", "message": "outTrackId, cardTemplateId, openSpaceId"})
            return
        deliver = body.get("imGroupOpenDeliverModel") or body.get("imRobotOpenDeliverModel") or {}
        fake.cards[track] = Card(str(body["cardTemplateId"]), space, deliver)
        self.send_json(200, {"success": True, "result": {"outTrackId": track, "deliverResults": [{"success": True}]}})

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        if self.path_only.startswith("/files/"):
            found = fake.files.get(self.path_only.removeprefix("/files/"))
            with fake.lock:
                fake.calls.append(Call("file.get", {}, at=time.monotonic(), status=200 if found else 404))
            if found is None:
                self.send_bytes(404, "text/plain", b"NoSuchKey")
                return
            self.send_bytes(200, found[0], found[1])
            return
        self.send_json(404, {"code": "NotFound", "message": "no such route"})

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        query = self.query_params()
        path = self.path_only
        if path == "/media/upload":
            self._upload(raw, query)
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self.send_json(400, {"code": "InvalidParameter", "message": "body is not JSON"})
            return
        if path == "/robot/sendBySession":
            self._session(body, query)
            return
        if path == "/v1.0/gateway/connections/open":
            self._open_connection(body)
            return
        if path == "/v1.0/oauth2/accessToken":
            with fake.lock:
                fake.calls.append(Call("accessToken", body, at=time.monotonic()))
                if (body.get("appKey"), body.get("appSecret")) != (CLIENT_ID, CLIENT_SECRET):
                    self.send_json(
                        400, {"code": "invalidClientIdOrSecret", "message": "无效的clientId或者clientSecret"}
                    )
                    return
                token = f"at-{next(fake._ids):08d}"
                fake.tokens.add(token)
            self.send_json(200, {"accessToken": token, "expireIn": 7200})
            return
        route = {
            "/v1.0/robot/groupMessages/send": "groupMessages.send",
            "/v1.0/robot/oToMessages/batchSend": "oToMessages.batchSend",
            "/v1.0/robot/messageFiles/download": "messageFiles.download",
            "/v1.0/card/instances/createAndDeliver": "card.createAndDeliver",
        }.get(path)
        if route is None:
            self.send_json(404, {"code": "NotFound", "message": "no such route"})
            return
        with fake.lock:
            authorized = self.headers.get("x-acs-dingtalk-access-token") in fake.tokens
            fake.calls.append(Call(route, body, at=time.monotonic(), status=200 if authorized else 401))
            if not authorized:
                self.send_json(401, {"code": "InvalidAuthentication", "message": "不合法的access_token"})
                return
            self._robot(route, body)

    def _robot(self, route: str, body: dict[str, Any]) -> None:
        fake = self.fake
        if route == "card.createAndDeliver":
            self._card_deliver(body)
            return
        if body.get("robotCode") != CLIENT_ID:
            self.send_json(400, {"code": "robot.notexist", "message": "机器人不存在"})
            return
        if route == "messageFiles.download":
            code = str(body.get("downloadCode") or "")
            if code not in fake.files:
                self.send_json(400, {"code": "invalidParameter.downloadCode", "message": "downloadCode无效"})
                return
            self.send_json(200, {"downloadUrl": f"{fake.origin}/files/{code}"})
            return
        params = json.loads(body.get("msgParam") or "{}")
        if route == "groupMessages.send":
            where = str(body.get("openConversationId") or "")
        else:
            users = body.get("userIds") or []
            where = f"user:{users[0]}" if users else ""
        if not where:
            self.send_json(400, {"code": "invalidParameter", "message": "no receiver"})
            return
        fake.sent.append(Sent(route, where, str(body.get("msgKey") or ""), params))
        self.send_json(200, {"processQueryKey": f"pqk{next(fake._ids):08d}"})

    def _session(self, body: dict[str, Any], query: dict[str, str]) -> None:
        fake = self.fake
        with fake.lock:
            fake.calls.append(Call("sessionWebhook", body, query, at=time.monotonic()))
            where = fake.sessions.get(query.get("session", ""))
            if where is None:
                self.send_json(200, {"errcode": 300001, "errmsg": "session不存在"})
                return
            kind = str(body.get("msgtype") or "")
            given = body.get(kind)
            params: dict[str, Any] = given if isinstance(given, dict) else {}
            at_users = list((body.get("at") or {}).get("atUserIds") or [])
            fake.sent.append(Sent("sessionWebhook", where, kind, params, at_users))
        self.send_json(200, {"errcode": 0, "errmsg": "ok"})

    def _upload(self, raw: bytes, query: dict[str, str]) -> None:
        fake = self.fake
        with fake.lock:
            fake.calls.append(Call("media.upload", {}, query, at=time.monotonic()))
            if query.get("access_token") not in fake.tokens:
                self.send_json(200, {"errcode": 40014, "errmsg": "不合法的access_token"})
                return
        part = self.form_parts(raw).get("media")
        if part is None or not part.get_filename():
            self.send_json(200, {"errcode": 40004, "errmsg": "不合法的媒体文件类型"})
            return
        payload = part.get_payload(decode=True)
        media_id = f"@lA{next(fake._ids):08d}"
        with fake.lock:
            fake.uploads[media_id] = (part.get_filename() or "", payload if isinstance(payload, bytes) else b"")
        self.send_json(200, {"errcode": 0, "errmsg": "ok", "type": query.get("type"), "media_id": media_id})
