"""A local n8n webhook speaking n8n's wire format, for tests of the n8n-agent runner.

`POST /webhook/<path>` answers from one script, one entry per request, in order:

* `stream(*parts)`: n8n's streaming answer (a Webhook trigger set to respond with streaming): newline-
  delimited JSON, `{"type":"begin","metadata":{...}}`, one `{"type":"item","content":...,"metadata":{...}}`
  per part, `{"type":"end","metadata":{...}}`; optionally held after some lines until the client goes away;
* `json(body)`: a plain JSON answer ("Respond to Webhook" with JSON, or the last node's output);
* `text(body)`: a plain text answer;
* `fail(status, message)`: n8n's error body `{"code", "message", "hint"}` (e.g. 404 for a webhook that is
  not registered, 500 "Error in workflow").

Authentication is checked as n8n's Webhook node checks it: `auth` is None, `("basic", user, password)`,
`("jwt", secret)` (HS256, verified here with hmac) or `("header", name, value)`; a failed check answers 403
`Authorization data is wrong!` (401 for a missing credential). Request bodies are kept in `requests`,
headers in `headers`; `disconnected` is set when a held stream sees its client close the connection.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import select
import socket
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WEBHOOK_PATH = "/webhook/langbot-chat"


@dataclass
class _Entry:
    kind: str  # stream | json | text | fail
    lines: list[dict[str, Any]] = field(default_factory=list)
    body: Any = None
    status: int = 200
    hold_after: int | None = None


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def jwt_claims_if_valid(token: str, secret: str) -> dict[str, Any] | None:
    """The claims of an HS256 JWT signed with `secret`, or None."""
    try:
        header, claims, signature = token.split(".")
    except ValueError:
        return None
    expected = hmac.new(secret.encode(), f"{header}.{claims}".encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, _unb64url(signature)):
        return None
    if json.loads(_unb64url(header)).get("alg") != "HS256":
        return None
    parsed: dict[str, Any] = json.loads(_unb64url(claims))
    return parsed


class FakeN8n:
    def __init__(self, auth: tuple[str, ...] | None = None) -> None:
        self.auth = auth
        self.script: deque[_Entry] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.jwt_claims: list[dict[str, Any]] = []
        self.disconnected = threading.Event()
        self.holding = threading.Event()
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def webhook_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{WEBHOOK_PATH}"

    def stream(self, *parts: Any, hold_after: int | None = None, node: str = "AI Agent") -> None:
        metadata = {"nodeId": "agent-1", "nodeName": node, "itemIndex": 0, "runIndex": 0, "timestamp": 1}
        lines = [
            {"type": "begin", "metadata": metadata},
            *({"type": "item", "content": part, "metadata": metadata} for part in parts),
            {"type": "end", "metadata": metadata},
        ]
        self.script.append(_Entry("stream", lines=lines, hold_after=hold_after))

    def stream_lines(self, lines: list[dict[str, Any]], *, hold_after: int | None = None) -> None:
        self.script.append(_Entry("stream", lines=lines, hold_after=hold_after))

    def json(self, body: Any, *, status: int = 200) -> None:
        self.script.append(_Entry("json", body=body, status=status))

    def text(self, body: str) -> None:
        self.script.append(_Entry("text", body=body))

    def fail(self, status: int, message: str, *, hint: str | None = None) -> None:
        body: dict[str, Any] = {"code": status, "message": message}
        if hint:
            body["hint"] = hint
        self.script.append(_Entry("fail", body=body, status=status))

    def start(self) -> FakeN8n:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def fake_n8n(auth: tuple[str, ...] | None = None) -> Iterator[FakeN8n]:
    server = FakeN8n(auth).start()
    try:
        yield server
    finally:
        server.stop()


def _handler_for(fake: FakeN8n) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            path = self.path.split("?")[0]
            if path != WEBHOOK_PATH:
                hint = "The workflow must be active for a production URL to run successfully."
                self._json(404, {"code": 404, "message": f'The requested webhook "POST {path}" is not registered.',
                                 "hint": hint})  # fmt: skip
                return
            problem = self._auth_problem()
            if problem is not None:
                self._json(problem[0], {"code": problem[0], "message": problem[1]})
                return
            fake.requests.append(json.loads(raw or b"{}"))
            fake.headers.append({name.lower(): value for name, value in self.headers.items()})
            if not fake.script:
                self._json(500, {"code": 0, "message": "nothing scripted"})
                return
            entry = fake.script.popleft()
            if entry.kind in ("json", "fail"):
                self._json(entry.status, entry.body)
            elif entry.kind == "text":
                self._send(200, "text/plain; charset=utf-8", entry.body.encode())
            else:
                self._stream(entry)

        def _auth_problem(self) -> tuple[int, str] | None:
            auth = fake.auth
            if auth is None:
                return None
            given = self.headers.get("authorization") or ""
            if auth[0] == "basic":
                if not given.startswith("Basic "):
                    return 401, "Authorization is required!"
                user, _, password = base64.b64decode(given[6:]).decode().partition(":")
                return None if (user, password) == (auth[1], auth[2]) else (403, "Authorization data is wrong!")
            if auth[0] == "jwt":
                if not given.startswith("Bearer "):
                    return 401, "No authorization header provided"
                claims = jwt_claims_if_valid(given[7:], auth[1])
                if claims is None:
                    return 403, "Authorization data is wrong!"
                fake.jwt_claims.append(claims)
                return None
            if self.headers.get(auth[1]) is None:
                return 401, "Authorization is required!"
            return None if self.headers.get(auth[1]) == auth[2] else (403, "Authorization data is wrong!")

        def _stream(self, entry: _Entry) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index, line in enumerate(entry.lines):
                if entry.hold_after is not None and index == entry.hold_after:
                    self._hold()
                    return
                if not self._chunk(json.dumps(line).encode() + b"\n"):
                    return
            self._chunk(b"")

        def _chunk(self, data: bytes) -> bool:
            try:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            except OSError:
                fake.disconnected.set()
                return False
            return True

        def _hold(self) -> None:
            fake.holding.set()
            while not fake._released.is_set():
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable:
                    try:
                        if not self.connection.recv(1, socket.MSG_PEEK):
                            fake.disconnected.set()
                            return
                    except OSError:
                        fake.disconnected.set()
                        return

        def _json(self, status: int, body: Any) -> None:
            self._send(status, "application/json; charset=utf-8", json.dumps(body).encode())

        def _send(self, status: int, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
