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
import select
import socket
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


@dataclass
class Upload:
    name: str
    mime_type: str
    content: bytes
    file_id: str


@dataclass
class FakeTbox:
    token: str = TOKEN
    script: deque[_Entry] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    uploads: list[Upload] = field(default_factory=list)
    issued_conversations: set[str] = field(default_factory=set)
    disconnected: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, *parts: str, thinking: tuple[str, ...] = (), hold_after: int | None = None) -> None:
        self.script.append(_Entry(parts=parts, thinking=thinking, hold_after=hold_after))

    def refuse(self, error_code: str, message: str) -> None:
        self.script.append(_Entry(refusal={"errorCode": error_code, "errorMsg": message, "success": False}))

    def fail(self, status: int, error_code: str, message: str) -> None:
        self.script.append(_Entry(status=status, refusal={"errorCode": error_code, "errorMsg": message}))

    def error_event(self, error_code: str, description: str, *, after: tuple[str, ...] = ()) -> None:
        self.script.append(_Entry(parts=after, error_event={"errorCode": error_code, "description": description}))

    def start(self) -> FakeTbox:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def fake_tbox(token: str = TOKEN) -> Iterator[FakeTbox]:
    server = FakeTbox(token).start()
    try:
        yield server
    finally:
        server.stop()


def _handler_for(fake: FakeTbox) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            path = self.path.split("?")[0]
            if self.headers.get("authorization") != fake.token:
                self._json(200, {"errorCode": "401", "errorMsg": "token is invalid or expired", "success": False})
                return
            if path == "/api/file/upload":
                self._upload(raw)
            elif path == "/api/chat":
                self._chat(json.loads(raw or b"{}"))
            else:
                self._json(404, {"errorCode": "404", "errorMsg": f"no route {path}"})

        def _chat(self, body: dict[str, Any]) -> None:
            fake.requests.append(body)
            fake.authorizations.append(self.headers.get("authorization") or "")
            if not fake.script:
                self._json(500, {"errorCode": "500", "errorMsg": "nothing scripted"})
                return
            entry = fake.script.popleft()
            if entry.refusal is not None:
                self._json(entry.status, {**entry.refusal, "traceId": "trace-1"})
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
            self._json(200, {"errorCode": "0", "errorMsg": "success", "data": data, "traceId": "trace-1"})

        def _stream(self, entry: _Entry, conversation_id: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream;charset=UTF-8")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
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
                    self._hold()
                    return
                data = {**message, "payload": json.dumps(message["payload"], ensure_ascii=False)}
                self._write(f"event: message\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode())
            if entry.error_event is not None:
                self._write(f"event: error\ndata: {json.dumps(entry.error_event, ensure_ascii=False)}\n\n".encode())

        def _upload(self, raw: bytes) -> None:
            message = BytesParser(policy=HTTP).parsebytes(
                f"Content-Type: {self.headers.get('content-type')}\r\n\r\n".encode() + raw
            )
            parts = [p for p in message.iter_parts() if p.get_param("name", header="content-disposition") == "file"]
            if not parts:
                self._json(200, {"errorCode": "400", "errorMsg": "file is required"})
                return
            payload = parts[0].get_payload(decode=True)
            content = payload if isinstance(payload, bytes) else b""
            upload = Upload(parts[0].get_filename() or "file", parts[0].get_content_type(), content, uuid.uuid4().hex)
            fake.uploads.append(upload)
            self._json(200, {"errorCode": "0", "errorMsg": "success", "data": upload.file_id, "traceId": "trace-u"})

        def _hold(self) -> None:
            """Send nothing more until the client goes away (or the server stops)."""
            while not fake.stopping.is_set():
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable:
                    try:
                        if not self.connection.recv(1, socket.MSG_PEEK):
                            fake.disconnected.set()
                            return
                    except OSError:
                        fake.disconnected.set()
                        return

        def _write(self, data: bytes) -> None:
            try:
                self.wfile.write(data)
                self.wfile.flush()
            except OSError:
                fake.disconnected.set()

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
