"""A local Ant Tbox (百宝箱) app API in the wire format Tbox's public Python SDK (tboxsdk) speaks, for tests of
the tbox-agent runner. Tbox publishes no full API reference; the shapes follow that SDK's client and message
parser and the plugin README lists what is assumed.

* `POST /api/chat` with `"stream": true` answers from the script with server-sent events `event: message`,
  `data: {"type", "lane", "payload"}` where `payload` is a JSON text: a `header` (`{"mediaType": "text"}`),
  optional `thinking` pieces (`{"ext_data": {"text"}, "event": "flow.node.llm.thinking", ...}`), one `chunk`
  per part (`{"conversationId", "messageId", "text"}`), `meta`, then `end`; optionally held after some
  events until the client goes away. `error_event` sends `event: error` with `{"errorCode", "description"}`.
* With `"stream": false` it answers `{"errorCode": "0", "errorMsg": "success", "data": {"conversationId",
  "messageId", "result": [{"lane", "mediaType", "chunk"}], "reasoningContent": [{"text"}]}, "traceId"}`.
* A refusal is HTTP 200 with `{"errorCode": <not "0">, "errorMsg", "success": false}` (`refuse`, a wrong
  token); `fail(status, ...)` answers an HTTP error with the same body.
* A `conversationId` the server did not issue starts a new conversation (a fresh id is answered).
* `POST /api/file/upload` (multipart `file`) answers `{"errorCode": "0", "data": "<file id>"}`.

Requests' JSON bodies are kept in `requests` and their `Authorization` headers in `authorizations`;
`disconnected` is set when a held stream sees its client close the connection.
"""

from __future__ import annotations

import json
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler, Upload, serving

__all__ = ["APP_ID", "TOKEN", "FakeTbox", "Upload", "fake_tbox"]

TOKEN = "tbox-fake-token-0123"
APP_ID = "202509APp1234567890"


@dataclass
class _Entry:
    parts: tuple[str, ...] = ()
    thinking: tuple[str, ...] = ()
    status: int = 200
    refusal: dict[str, Any] | None = None
    error_event: dict[str, Any] | None = None
    hold_after: int | None = None


class FakeTbox(FakePlatformServer):
    def __init__(self, token: str = TOKEN) -> None:
        super().__init__(_TboxHandler)
        self.token = token
        self.authorizations: list[str] = []
        self.uploads: list[Upload] = []
        self.issued_conversations: set[str] = set()

    @property
    def base_url(self) -> str:
        return self.origin

    def answer(self, *parts: str, thinking: tuple[str, ...] = (), hold_after: int | None = None) -> None:
        self.script.append(_Entry(parts=parts, thinking=thinking, hold_after=hold_after))

    def refuse(self, error_code: str, message: str) -> None:
        self.script.append(_Entry(refusal={"errorCode": error_code, "errorMsg": message, "success": False}))

    def fail(self, status: int, error_code: str, message: str) -> None:
        self.script.append(_Entry(status=status, refusal={"errorCode": error_code, "errorMsg": message}))

    def error_event(self, error_code: str, description: str, *, after: tuple[str, ...] = ()) -> None:
        self.script.append(_Entry(parts=after, error_event={"errorCode": error_code, "description": description}))


def fake_tbox(token: str = TOKEN) -> AbstractContextManager[FakeTbox]:
    return serving(FakeTbox(token))


class _TboxHandler(PlatformHandler):
    fake: FakeTbox

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        raw = self.read_body()
        path = self.path_only
        if self.headers.get("authorization") != self.fake.token:
            self.send_json(200, {"errorCode": "401", "errorMsg": "token is invalid or expired", "success": False})
            return
        if path == "/api/file/upload":
            self._upload(raw)
        elif path == "/api/chat":
            self._chat(json.loads(raw or b"{}"))
        else:
            self.send_json(404, {"errorCode": "404", "errorMsg": f"no route {path}"})

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.fake
        fake.requests.append(body)
        fake.authorizations.append(self.headers.get("authorization") or "")
        if not fake.script:
            self.send_json(500, {"errorCode": "500", "errorMsg": "nothing scripted"})
            return
        entry = fake.script.popleft()
        if entry.refusal is not None:
            self.send_json(entry.status, {**entry.refusal, "traceId": "trace-1"})
            return
        sent = body.get("conversationId")
        conversation_id = sent if sent in fake.issued_conversations else f"tbox-conv-{uuid.uuid4().hex[:8]}"
        fake.issued_conversations.add(conversation_id)
        if body.get("stream"):
            self._stream(entry, conversation_id)
            return
        data = {
            "conversationId": conversation_id, "messageId": "tbox-msg-1",
            "result": [{"lane": "default", "mediaType": "text", "chunk": "".join(entry.parts)}],
            "reasoningContent": [{"text": "".join(entry.thinking)}] if entry.thinking else [],
        }  # fmt: skip
        self.send_json(200, {"errorCode": "0", "errorMsg": "success", "data": data, "traceId": "trace-1"})

    def _stream(self, entry: _Entry, conversation_id: str) -> None:
        self.start_stream("text/event-stream;charset=UTF-8")
        messages: list[dict[str, Any]] = [{"type": "header", "lane": "default", "payload": {"mediaType": "text"}}]
        messages += [
            {"type": "thinking", "payload": {"ext_data": {"text": piece}, "event": "flow.node.llm.thinking",
                                             "entity": {"node_type": "text-completion", "node_name": "模型推理"}}}
            for piece in entry.thinking
        ]  # fmt: skip
        messages += [
            {"type": "chunk", "lane": "default",
             "payload": {"conversationId": conversation_id, "messageId": "tbox-msg-1", "text": part}}
            for part in entry.parts
        ]  # fmt: skip
        if entry.error_event is None:
            messages += [{"type": "meta", "payload": {"traceId": "trace-1"}}, {"type": "end", "payload": {}}]
        for index, message in enumerate(messages):
            if entry.hold_after is not None and index == entry.hold_after:
                self.hold()
                return
            # Tbox sends each message's payload as JSON text inside the JSON data.
            data = {**message, "payload": json.dumps(message["payload"], ensure_ascii=False)}
            self.write_event(data, event="message")
        if entry.error_event is not None:
            self.write_event(entry.error_event, event="error")

    def _upload(self, raw: bytes) -> None:
        part = self.form_parts(raw).get("file")
        if part is None:
            self.send_json(200, {"errorCode": "400", "errorMsg": "file is required"})
            return
        upload = Upload.of(part, uuid.uuid4().hex)
        self.fake.uploads.append(upload)
        self.send_json(200, {"errorCode": "0", "errorMsg": "success", "data": upload.file_id, "traceId": "trace-u"})
