"""A local webhook receiver: records every POST (raw body and headers) and answers from a script of status
codes (204 when the script is empty; `(status, seconds)` answers late), as a customer's endpoint would."""

from __future__ import annotations

import time
from http import HTTPStatus

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler


class _ReceiverHandler(PlatformHandler):
    def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
        body = self.read_body()
        status = self.fake.script.popleft() if self.fake.script else HTTPStatus.NO_CONTENT
        if isinstance(status, tuple):  # (status, seconds to wait before answering)
            status, delay = status
            time.sleep(delay)
        self.fake.requests.append(
            {"path": self.path_only, "headers": self.header_map(), "body": body, "status": status}
        )
        if status == HTTPStatus.NO_CONTENT:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_bytes(status, "text/plain", f"answered {status}".encode())


class WebhookReceiver(FakePlatformServer):
    def __init__(self) -> None:
        super().__init__(_ReceiverHandler)

    @property
    def url(self) -> str:
        return f"{self.origin}/hooks/langbot"

    def accepted(self) -> list[dict]:
        return [r for r in self.requests if 200 <= int(r["status"]) < 300]
