"""The HTTP plumbing the fake agent platforms (Dify, n8n, Coze, DashScope, Langflow, Tbox) share; each fake's
module keeps only its platform's routes and wire shapes.

* `FakePlatformServer`: a threaded HTTP server on a free local port with the script of answers (`script`),
  the recorded request bodies (`requests`), and the events a test waits on — `holding` (a stream is being
  held), `disconnected` (a held or written stream saw its client go away); `release()` lets held streams end;
  `refuse_connections()` / `accept_connections()` take the port down and up again.
  `serving(fake)` starts a fake and always stops it.
* `PlatformHandler`: the request handler a fake subclasses (`do_POST`), with the body, query and headers of the
  request, JSON and plain answers, a streamed answer (optionally HTTP/1.1-chunked), server-sent event frames
  (`write_event`, with the separator a platform uses), holding a stream until the client disconnects, and
  multipart form parts for upload endpoints (`form_parts`, `Upload.of`), and hanging up without an answer
  (`hang_up`).
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

HOLD_POLL_SECONDS = 0.05


@dataclass
class Upload:
    """A file a fake platform received on its upload endpoint."""

    name: str
    mime_type: str
    content: bytes
    file_id: str
    user: str = ""

    @classmethod
    def of(cls, part: EmailMessage, file_id: str, *, user: str = "") -> Upload:
        payload = part.get_payload(decode=True)
        content = payload if isinstance(payload, bytes) else b""
        return cls(part.get_filename() or "file", part.get_content_type(), content, file_id, user)


class FakePlatformServer:
    """A fake platform served on 127.0.0.1 at a free port by `handler`, which sees this object as `fake`."""

    def __init__(self, handler: type[PlatformHandler]) -> None:
        self.script: deque[Any] = deque()
        self.requests: list[dict[str, Any]] = []
        self.holding = threading.Event()
        self.disconnected = threading.Event()
        self.released = threading.Event()
        # Calls to carry out and then hang up on without answering (`hang_up_after_next`), by method/route.
        self.hang_ups: dict[str, int] = {}
        self._hang_up_lock = threading.Lock()
        bound = type(handler.__name__, (handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), bound)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def hang_up_after_next(self, method: str) -> None:
        """Carry out the next call of `method`, then close its connection without answering."""
        with self._hang_up_lock:
            self.hang_ups[method] = self.hang_ups.get(method, 0) + 1

    def take_hang_up(self, method: str) -> bool:
        """Whether this call of `method` is one to hang up on (and count it taken)."""
        with self._hang_up_lock:
            if not self.hang_ups.get(method):
                return False
            self.hang_ups[method] -= 1
            return True

    def refuse_connections(self) -> None:
        """Stop listening (a connection is refused, as when the platform is down) until
        `accept_connections()` listens again on the same port."""
        self._server.shutdown()
        self._server.server_close()

    def accept_connections(self) -> None:
        port = self._server.server_address[1]
        handler = self._server.RequestHandlerClass
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Let held streams go on (and end)."""
        self.released.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()


Fake = TypeVar("Fake", bound=FakePlatformServer)


@contextmanager
def serving(fake: Fake) -> Iterator[Fake]:
    """`fake`, started, and stopped when the block ends however it ends."""
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


class PlatformHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakePlatformServer
    json_content_type = "application/json"
    _chunked = False

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- the request --------------------------------------------------------------------------------

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    @property
    def path_only(self) -> str:
        return urlsplit(self.path).path

    def query_params(self) -> dict[str, str]:
        return {name: values[0] for name, values in parse_qs(urlsplit(self.path).query).items()}

    def header_map(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def form_parts(self, raw: bytes) -> dict[str, EmailMessage]:
        """The parts of a multipart/form-data body by field name (the first part of each name)."""
        message = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {self.headers.get('content-type')}\r\n\r\n".encode() + raw
        )
        parts: dict[str, EmailMessage] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if isinstance(name, str) and isinstance(part, EmailMessage):
                parts.setdefault(name, part)
        return parts

    # -- whole answers ------------------------------------------------------------------------------

    def hang_up(self) -> None:
        """Close the connection without answering: a request the platform carried out, whose answer the
        client never gets (what a dropped connection or a read timeout looks like from the client)."""
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def send_json(self, status: int, body: Any) -> None:
        self.send_bytes(status, self.json_content_type, json.dumps(body, ensure_ascii=False).encode())

    def send_bytes(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # -- streamed answers ---------------------------------------------------------------------------

    def start_stream(
        self, content_type: str = "text/event-stream", *, chunked: bool = False, no_cache: bool = False
    ) -> None:
        """Answer 200 with a body written piece by piece: HTTP/1.1 chunks when `chunked`, else until the
        connection closes."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        if no_cache:
            self.send_header("Cache-Control", "no-cache")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self._chunked = chunked

    def write(self, data: bytes) -> bool:
        """Send a piece of the streamed body; False (and `disconnected` set) when the client has gone."""
        frame = f"{len(data):x}\r\n".encode() + data + b"\r\n" if self._chunked else data
        try:
            self.wfile.write(frame)
            self.wfile.flush()
        except OSError:
            self.fake.disconnected.set()
            return False
        return True

    def end_stream(self) -> None:
        if self._chunked:
            self.write(b"")

    def write_event(
        self,
        data: Any = None,
        *,
        event: str | None = None,
        event_id: int | str | None = None,
        comment: str | None = None,
        separator: str = ": ",
    ) -> bool:
        """One server-sent event: `id`, `event`, a `:comment` line and `data` as JSON, each only when given,
        with `separator` between field and value (platforms differ: ``": "`` or ``":"``)."""
        lines = []
        if event_id is not None:
            lines.append(f"id{separator}{event_id}")
        if event is not None:
            lines.append(f"event{separator}{event}")
        if comment is not None:
            lines.append(f":{comment}")
        if data is not None:
            lines.append(f"data{separator}{json.dumps(data, ensure_ascii=False)}")
        return self.write(("\n".join(lines) + "\n\n").encode())

    def hold(self) -> None:
        """Send nothing more until the client goes away (then `disconnected` is set) or the fake is
        released or stopped."""
        self.fake.holding.set()
        while not self.fake.released.is_set():
            readable, _, _ = select.select([self.connection], [], [], HOLD_POLL_SECONDS)
            if readable:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        self.fake.disconnected.set()
                        return
                except OSError:
                    self.fake.disconnected.set()
                    return
