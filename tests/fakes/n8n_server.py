"""A local n8n webhook speaking n8n's wire format, for tests of the n8n-agent runner.

`POST /webhook/<path>` answers from one script, one entry per request, in order:

* `stream(*parts)`: n8n's streaming answer (a Webhook trigger set to respond with streaming): newline-
  delimited JSON, `{"type":"begin","metadata":{...}}`, one `{"type":"item","content":...,"metadata":{...}}`
  per part, `{"type":"end","metadata":{...}}`; optionally held after some lines until the client goes away;
* `respond_item(item)`: what a streaming webhook answers when its "Respond to Webhook" node returns the
  first incoming item: the item as JSON *text* in one `item` line (as n8n 2.x sends it);
* `stream_failure(node)`: the lines n8n streams when a node fails: `begin`, then `{"type":"error",
  "content":null,"metadata":{"nodeName":node,...}}`;
* `json(body)`: a plain JSON answer ("Respond to Webhook" with JSON, or the last node's output; a Chat
  Trigger answers `{"output": ...}`);
* `text(body)`: a plain text answer;
* `fail(status, message)`: n8n's error body `{"code", "message", "hint"}` (e.g. 404 for a webhook that is
  not registered, 500 "Error in workflow").

Authentication is checked as n8n's Webhook node checks it: `auth` is None, `("basic", user, password)`,
`("jwt", secret)` (HS256, verified here with hmac) or `("header", name, value)`; a failed check answers 403
`Authorization data is wrong!` (401 for a missing credential). The webhook answers at `webhook_url` and, as
a Chat Trigger does, at `chat_url` (`/webhook/<id>/chat`). Request bodies are kept in `requests`,
headers in `headers`; `disconnected` is set when a held stream sees its client close the connection.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler, serving

WEBHOOK_PATH = "/webhook/langbot-chat"
CHAT_TRIGGER_PATH = "/webhook/0b3c5d7e-chat-trigger/chat"


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


class FakeN8n(FakePlatformServer):
    def __init__(self, auth: tuple[str, ...] | None = None) -> None:
        super().__init__(_N8nHandler)
        self.auth = auth
        self.headers: list[dict[str, str]] = []
        self.jwt_claims: list[dict[str, Any]] = []

    @property
    def webhook_url(self) -> str:
        return f"{self.origin}{WEBHOOK_PATH}"

    @property
    def chat_url(self) -> str:
        return f"{self.origin}{CHAT_TRIGGER_PATH}"

    def stream(self, *parts: Any, hold_after: int | None = None, node: str = "AI Agent") -> None:
        metadata = {"nodeId": "agent-1", "nodeName": node, "itemIndex": 0, "runIndex": 0, "timestamp": 1}
        lines = [
            {"type": "begin", "metadata": metadata},
            *({"type": "item", "content": part, "metadata": metadata} for part in parts),
            {"type": "end", "metadata": metadata},
        ]
        self.script.append(_Entry("stream", lines=lines, hold_after=hold_after))

    def respond_item(self, item: dict[str, Any], *, node: str = "Respond to Webhook") -> None:
        metadata = {"nodeId": "respond-1", "nodeName": node, "itemIndex": 0, "runIndex": 0, "timestamp": 1}
        self.stream_lines(
            [
                {"type": "begin", "metadata": metadata},
                {"type": "item", "content": json.dumps(item), "metadata": metadata},
                {"type": "end", "metadata": metadata},
            ]
        )

    def stream_failure(self, node: str) -> None:
        metadata = {"nodeId": "node-1", "nodeName": node, "itemIndex": 0, "runIndex": 0, "timestamp": 1}
        self.stream_lines([{"type": "begin", "metadata": metadata}, {"type": "error", "content": None,
                                                                     "metadata": metadata}])  # fmt: skip

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


def fake_n8n(auth: tuple[str, ...] | None = None) -> AbstractContextManager[FakeN8n]:
    return serving(FakeN8n(auth))


class _N8nHandler(PlatformHandler):
    fake: FakeN8n
    json_content_type = "application/json; charset=utf-8"

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        path = self.path_only
        if path not in (WEBHOOK_PATH, CHAT_TRIGGER_PATH):
            hint = "The workflow must be active for a production URL to run successfully."
            self.send_json(404, {"code": 404, "message": f'The requested webhook "POST {path}" is not registered.',
                                 "hint": hint})  # fmt: skip
            return
        problem = self._auth_problem()
        if problem is not None:
            self.send_json(problem[0], {"code": problem[0], "message": problem[1]})
            return
        fake.requests.append(json.loads(raw or b"{}"))
        fake.headers.append(self.header_map())
        if not fake.script:
            self.send_json(500, {"code": 0, "message": "nothing scripted"})
            return
        entry = fake.script.popleft()
        if entry.kind in ("json", "fail"):
            self.send_json(entry.status, entry.body)
        elif entry.kind == "text":
            self.send_bytes(200, "text/plain; charset=utf-8", entry.body.encode())
        else:
            self._stream(entry)

    def _auth_problem(self) -> tuple[int, str] | None:
        auth = self.fake.auth
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
            self.fake.jwt_claims.append(claims)
            return None
        if self.headers.get(auth[1]) is None:
            return 401, "Authorization is required!"
        return None if self.headers.get(auth[1]) == auth[2] else (403, "Authorization data is wrong!")

    def _stream(self, entry: _Entry) -> None:
        self.start_stream("application/json; charset=utf-8", chunked=True)
        for index, line in enumerate(entry.lines):
            if entry.hold_after is not None and index == entry.hold_after:
                self.hold()
                return
            if not self.write(json.dumps(line).encode() + b"\n"):
                return
        self.end_stream()
