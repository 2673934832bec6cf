"""A local Coze API speaking the real wire format (shapes from Coze's public chat v3 and file docs), for tests
of the coze-agent runner.

* `POST /v3/chat` answers from one script, one entry per request, in order: a stream of events (`stream`:
  each `event:<name>\\ndata:<json>\\n\\n`, as Coze frames them, ending with `event:done\\ndata:"[DONE]"`),
  optionally held after some events until the client goes away; an HTTP error with Coze's body
  `{"code", "msg"}` (`fail`); or Coze's way of refusing a request — HTTP 200 with a JSON `{"code", "msg"}`
  body instead of a stream (`refuse`). `chat_events` builds the events of an answer.
* A `conversation_id` query parameter the server did not issue answers HTTP 200 `{"code": 4200, "msg":
  "Requested resource ... does not exist"}` (the code is this fake's assumption; see the plugin's README).
* `POST /v1/files/upload` (multipart `file`) answers `{"code": 0, "data": {"id", "bytes", "file_name",
  "created_at"}, "msg": ""}`; the uploads are kept in `uploads`.
* `POST /v3/chat/cancel` answers the cancelled chat and is kept in `cancels`.
* Every call needs `Authorization: Bearer <token>`; otherwise 401 `{"code": 4100, "msg": ...}`.

Requests' JSON bodies are kept in `requests` and their query parameters in `params`; `disconnected` is set
when a held stream sees its client close the connection.
"""

from __future__ import annotations

import json
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler, Upload, serving

__all__ = ["BOT_ID", "TOKEN", "FakeCoze", "Upload", "chat_events", "failed_chat", "fake_coze"]

TOKEN = "pat_fake_coze_token"
BOT_ID = "7350000000000000001"


@dataclass
class _Entry:
    kind: str  # stream | fail | refuse
    events: list[tuple[str, Any]] = field(default_factory=list)
    status: int = 200
    body: Any = None
    hold_after: int | None = None


def chat_events(
    *parts: str,
    conversation_id: str = "coze-conv-1",
    chat_id: str = "chat-1",
    usage: dict[str, Any] | None = None,
    reasoning: tuple[str, ...] = (),
    follow_ups: tuple[str, ...] = (),
    tool: tuple[str, dict[str, Any], str] | None = None,
) -> list[tuple[str, Any]]:
    """A bot's answer: the chat created and in progress, optionally a plugin call and its response, one
    `conversation.message.delta` per reasoning piece then per part, the completed answer, a `verbose`
    message, follow-up suggestions, `conversation.chat.completed` with usage, and `done`."""
    chat = {"id": chat_id, "conversation_id": conversation_id, "bot_id": BOT_ID, "created_at": 1718609571}
    message = {"id": "msg-1", "conversation_id": conversation_id, "bot_id": BOT_ID, "chat_id": chat_id,
               "role": "assistant", "content_type": "text"}  # fmt: skip
    events: list[tuple[str, Any]] = [
        ("conversation.chat.created", {**chat, "status": "created"}),
        ("conversation.chat.in_progress", {**chat, "status": "in_progress"}),
    ]
    if tool is not None:
        name, arguments, output = tool
        call = json.dumps({"name": name, "arguments": arguments, "plugin_id": 7281192623887548473})
        completed = "conversation.message.completed"
        events += [
            (completed, {**message, "id": "msg-call", "type": "function_call", "content": call}),
            (completed, {**message, "id": "msg-tool", "type": "tool_response", "content": output}),
        ]
    events += [
        ("conversation.message.delta", {**message, "type": "answer", "content": "", "reasoning_content": piece})
        for piece in reasoning
    ]
    events += [("conversation.message.delta", {**message, "type": "answer", "content": part}) for part in parts]
    events.append(("conversation.message.completed", {**message, "type": "answer", "content": "".join(parts)}))
    events.append(
        (
            "conversation.message.completed",
            {
                **message,
                "id": "msg-v",
                "type": "verbose",
                "content": json.dumps({"msg_type": "generate_answer_finish", "data": ""}),
            },
        )
    )
    events += [
        ("conversation.message.completed", {**message, "id": f"msg-f{i}", "type": "follow_up", "content": text})
        for i, text in enumerate(follow_ups)
    ]
    events.append(
        (
            "conversation.chat.completed",
            {
                **chat,
                "status": "completed",
                "completed_at": 1718609575,
                "usage": usage or {"token_count": 1161, "output_count": 35, "input_count": 1126},
            },
        )
    )
    events.append(("done", "[DONE]"))
    return events


def failed_chat(code: int, msg: str, *, conversation_id: str = "coze-conv-1") -> list[tuple[str, Any]]:
    chat = {"id": "chat-f", "conversation_id": conversation_id, "bot_id": BOT_ID}
    return [
        ("conversation.chat.created", {**chat, "status": "created"}),
        ("conversation.chat.failed", {**chat, "status": "failed", "last_error": {"code": code, "msg": msg}}),
        ("done", "[DONE]"),
    ]


class FakeCoze(FakePlatformServer):
    def __init__(self, token: str = TOKEN) -> None:
        super().__init__(_CozeHandler)
        self.token = token
        self.params: list[dict[str, str]] = []
        self.uploads: list[Upload] = []
        self.cancels: list[dict[str, Any]] = []
        self.issued_conversations: set[str] = set()

    @property
    def base_url(self) -> str:
        return self.origin

    def stream(self, events: list[tuple[str, Any]], *, hold_after: int | None = None) -> None:
        for _, data in events:
            if isinstance(data, dict) and data.get("conversation_id"):
                self.issued_conversations.add(data["conversation_id"])
        self.script.append(_Entry("stream", events=events, hold_after=hold_after))

    def fail(self, status: int, code: int, msg: str) -> None:
        self.script.append(_Entry("fail", status=status, body={"code": code, "msg": msg}))

    def refuse(self, code: int, msg: str) -> None:
        self.script.append(_Entry("refuse", body={"code": code, "msg": msg}))


def fake_coze(token: str = TOKEN) -> AbstractContextManager[FakeCoze]:
    return serving(FakeCoze(token))


class _CozeHandler(PlatformHandler):
    fake: FakeCoze
    json_content_type = "application/json; charset=utf-8"

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        path = self.path_only
        if self.headers.get("authorization") != f"Bearer {fake.token}":
            self.send_json(401, {"code": 4100, "msg": "authentication is invalid", "detail": {"logid": "log-1"}})
            return
        if path == "/v1/files/upload":
            self._upload(raw)
        elif path == "/v3/chat/cancel":
            body = json.loads(raw or b"{}")
            fake.cancels.append(body)
            self.send_json(200, {"code": 0, "msg": "", "data": {**body, "status": "canceled"}})
        elif path == "/v3/chat":
            self._chat(json.loads(raw or b"{}"), self.query_params())
        else:
            self.send_json(404, {"code": 4004, "msg": f"no route {path}"})

    def _chat(self, body: dict[str, Any], params: dict[str, str]) -> None:
        fake = self.fake
        fake.requests.append(body)
        fake.params.append(params)
        conversation_id = params.get("conversation_id")
        if conversation_id and conversation_id not in fake.issued_conversations:
            self.send_json(200, {"code": 4200, "msg": f"Requested resource conversation_id={conversation_id} "
                                 "does not exist"})  # fmt: skip
            return
        if not fake.script:
            self.send_json(500, {"code": 5000, "msg": "nothing scripted"})
            return
        entry = fake.script.popleft()
        if entry.kind == "fail":
            self.send_json(entry.status, entry.body)
        elif entry.kind == "refuse":
            self.send_json(200, entry.body)
        else:
            self._stream(entry)

    def _upload(self, raw: bytes) -> None:
        part = self.form_parts(raw).get("file")
        if part is None:
            self.send_json(200, {"code": 4000, "msg": "file is required"})
            return
        upload = Upload.of(part, uuid.uuid4().hex)
        self.fake.uploads.append(upload)
        data = {"id": upload.file_id, "bytes": len(upload.content), "file_name": upload.name, "created_at": 1715847583}
        self.send_json(200, {"code": 0, "data": data, "msg": ""})

    def _stream(self, entry: _Entry) -> None:
        self.start_stream(no_cache=True)
        for index, (name, data) in enumerate(entry.events):
            if entry.hold_after is not None and index == entry.hold_after:
                self.hold()
                return
            self.write_event(data, event=name, separator=":")
        if entry.hold_after is not None and entry.hold_after >= len(entry.events):
            self.hold()
