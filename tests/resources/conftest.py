"""A local OpenAI-compatible server for the resources tests: `GET /v1/models` in the real list shape,
and OpenAI's 401 body for any key but the right one (quoting the key back for a key `sk-echo…`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

GOOD_KEY = "sk-good-key-123"
MODELS_BODY = {"object": "list", "data": [{"id": "m1", "object": "model", "created": 0, "owned_by": "x"}]}
UNAUTHORIZED_BODY = {
    "error": {"message": "Incorrect API key", "type": "invalid_request_error", "code": "invalid_api_key"}
}


@dataclass
class FakeProvider:
    base_url: str
    requests: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture
def fake_openai() -> Iterator[FakeProvider]:
    """The server on a free port of 127.0.0.1; `base_url` ends in `/v1` as OpenAI's does."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
            if self.path != "/v1/models":
                self._answer(404, {"error": {"message": "Not found", "type": "invalid_request_error"}})
            elif (self.headers.get("Authorization") or "").startswith("Bearer sk-echo"):
                # As some providers do: the key sent, quoted back in the error message.
                key = self.headers["Authorization"].removeprefix("Bearer ")
                self._answer(
                    401, {"error": {"message": f"Incorrect API key provided: {key}", "code": "invalid_api_key"}}
                )
            elif self.headers.get("Authorization") != f"Bearer {GOOD_KEY}":
                self._answer(401, UNAUTHORIZED_BODY)
            else:
                self._answer(200, MODELS_BODY)

        def _answer(self, status: int, body: dict) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeProvider(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", requests=seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
