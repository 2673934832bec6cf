"""A local n8n webhook speaking n8n's wire format, for tests of the n8n-agent runner.

Every body below that n8n itself sends is the one n8n 2.8.4 sent to tests/peers (its `n8n start` run as
tests/peers/processes.py runs it), or, for the failures the peers' workflows do not reach, the one its
source builds; when a newer n8n answers differently, the fake follows the real body.

`POST /webhook/<path>` answers from one script, one entry per request, in order:

* `stream(*parts)`: n8n's streaming answer (a Webhook trigger set to respond with streaming): newline-
  delimited JSON, `{"type":"begin","metadata":{...}}`, one `{"type":"item","content":...,"metadata":{...}}`
  per part, `{"type":"end","metadata":{...}}`; optionally held after some lines until the client goes away;
* `respond_item(item)`: what a streaming webhook answers when its "Respond to Webhook" node returns the
  first incoming item: the item as JSON *text* in one `item` line (as n8n 2.x sends it);
* `stream_failure(node)`: what n8n streams when a node fails: one `{"type":"error","content":null,
  "metadata":{"nodeId":...,"nodeName":node,"runIndex":0,"itemIndex":0}}` line, no `begin` before it;
* `json(body)`: a plain JSON answer ("Respond to Webhook" with JSON, or the last node's output; a Chat
  Trigger answers `{"output": ...}`);
* `text(body, status=200)`: a plain text answer (with another status: what a proxy in front of n8n says);
* `workflow_error()`: a plain (not streaming) webhook whose workflow failed: 500 `{"message":"Error in
  workflow"}`, nothing else;
* `fail(status, message)`: the body of n8n's error handler, `{"code", "message"}` (`code` 0 unless given,
  `hint` when given) plus the `stacktrace` n8n adds unless it runs with NODE_ENV=production — as for
  "Workflow Webhook Error: Workflow could not be started!" (500), or the 404 of a path no webhook is
  registered on, which every other path gets.

Authentication is checked as n8n's Webhook node checks it: `auth` is None, `("basic", user, password)`,
`("jwt", secret)` (HS256, verified here with hmac) or `("header", name, value)`. A failed check answers
plain text (no Content-Type) with `WWW-Authenticate: Basic realm="Webhook"`: 403 `Authorization data is
wrong!` for a wrong or missing header and wrong basic credentials, 401 `Authorization is required!` without
basic credentials, 401 `No token provided` without a JWT and 403 with the JWT library's reason for a bad one.
The webhook answers at `webhook_url` and, as a Chat Trigger does, at `chat_url` (`/webhook/<id>/chat`).
Request bodies are kept in `requests`, headers in `headers`; `disconnected` is set when a held stream sees its
client close the connection.
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

WEBHOOK_PREFIX = "/webhook/"
WEBHOOK_PATH = "/webhook/langbot-chat"
CHAT_TRIGGER_PATH = "/webhook/0b3c5d7e-chat-trigger/chat"
WRONG_AUTHORIZATION = "Authorization data is wrong!"
STACK_FRAME_FILE = "/usr/local/lib/node_modules/n8n/src/webhooks/webhook-request-handler.ts:65:21"
NOT_REGISTERED_HINT = (
    "The workflow must be active for a production URL to run successfully. You can activate the workflow using the"
    " toggle in the top-right of the editor. Note that unlike test URL calls, production URL calls aren't shown on"
    " the canvas (only in the executions list)"
)


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

    def stream_failure(self, node: str, *, node_id: str = "node-1") -> None:
        metadata = {"nodeId": node_id, "nodeName": node, "runIndex": 0, "itemIndex": 0}
        self.stream_lines([{"type": "error", "content": None, "metadata": metadata}])

    def stream_lines(self, lines: list[dict[str, Any]], *, hold_after: int | None = None) -> None:
        self.script.append(_Entry("stream", lines=lines, hold_after=hold_after))

    def json(self, body: Any, *, status: int = 200) -> None:
        self.script.append(_Entry("json", body=body, status=status))

    def text(self, body: str, *, status: int = 200) -> None:
        self.script.append(_Entry("text", body=body, status=status))

    def workflow_error(self) -> None:
        self.json({"message": "Error in workflow"}, status=500)

    def fail(self, status: int, message: str, *, code: int = 0, hint: str | None = None) -> None:
        self.script.append(_Entry("fail", body=error_handler_body(message, code=code, hint=hint), status=status))


def error_handler_body(message: str, *, code: int = 0, hint: str | None = None) -> dict[str, Any]:
    """What n8n's error handler answers: `code` is the error's own code (0 for most), `hint` only when the error
    has one, and a `stacktrace` whenever n8n does not run with NODE_ENV=production (as `n8n start` does not)."""
    body: dict[str, Any] = {"code": code, "message": message}
    if hint:
        body["hint"] = hint
    error = "ResponseError" if code else "UnexpectedError"
    body["stacktrace"] = f"{error}: {message}\n    at WebhookRequestHandler.handleRequest ({STACK_FRAME_FILE})"
    return body


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
            message = f'The requested webhook "POST {path.removeprefix(WEBHOOK_PREFIX)}" is not registered.'
            self.send_json(404, error_handler_body(message, code=404, hint=NOT_REGISTERED_HINT))
            return
        problem = self._auth_problem()
        if problem is not None:
            self._refuse(*problem)
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
            self.send_bytes(entry.status, "text/plain; charset=utf-8", entry.body.encode())
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
            return None if (user, password) == (auth[1], auth[2]) else (403, WRONG_AUTHORIZATION)
        if auth[0] == "jwt":
            # n8n takes whatever follows the first space as the token, whatever the scheme.
            token = given.split(" ")[1] if given.count(" ") else ""
            if not token:
                return 401, "No token provided"
            claims = jwt_claims_if_valid(token, auth[1])
            if claims is None:
                return 403, "invalid signature"
            self.fake.jwt_claims.append(claims)
            return None
        # A missing header is refused as a wrong one: n8n does not tell them apart.
        return None if self.headers.get(auth[1]) == auth[2] else (403, WRONG_AUTHORIZATION)

    def _refuse(self, status: int, message: str) -> None:
        """n8n's Webhook node writes the refusal itself: plain text, with no Content-Type."""
        data = message.encode()
        self.send_response(status)
        self.send_header("WWW-Authenticate", 'Basic realm="Webhook"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, entry: _Entry) -> None:
        self.start_stream("application/json; charset=utf-8", chunked=True)
        for index, line in enumerate(entry.lines):
            if entry.hold_after is not None and index == entry.hold_after:
                self.hold()
                return
            if not self.write(json.dumps(line).encode() + b"\n"):
                return
        self.end_stream()
