"""A local OpenAI-compatible server speaking the real wire format, for tests of the host's model calls.

`POST /v1/chat/completions` and `POST /v1/rerank` answer from one script, one entry per request, in
order: a JSON answer (`reply`; `rerank_answer()` builds a rerank one), a streamed one as server-sent
events (`stream`: `data: {chunk}\\n\\n` frames, then `data: [DONE]`), an error with an OpenAI error body
(`fail`), a stream that sends its first chunk and then holds until the client goes away (`stall`), or one
whose connection closes after its chunks without `[DONE]` (`cut`). A
stream can also be held after its first chunk until the test calls `release()`. `POST /v1/embeddings`
answers outside the script with deterministic vectors (`embedding_of`: hashed words, so texts sharing
words are close; `embedding_aliases` maps a word to another to fake a synonym) unless `fail_embeddings`
queued an error for it. The requests' JSON bodies
are kept in `requests`, their paths and headers in `paths` and `headers`; `disconnected` is set when a
held stream sees its client close the connection.

A stream can be paced (`delay` seconds before each chunk after the first), so a client sees its chunks
arrive one by one. When the script is empty, a `responder` set with `respond_with()` chooses the answer from
the request itself (a function of the path and the JSON body returning `replied(...)`, `streamed(...)` or
`failed(...)`, or None for the 404 an unscripted request gets) — for conversations whose number and kind of
requests a test does not fix in advance.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class _Entry:
    kind: str  # reply | stream | fail | stall | cut
    body: Any = None
    chunks: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False
    delay: float = 0.0
    """Seconds to wait before each chunk after the first (a paced stream)."""


Answer = _Entry
"""What a responder returns: `replied(...)`, `streamed(...)` or `failed(...)`."""
Responder = Callable[[str, dict[str, Any]], "Answer | None"]


def replied(body: dict[str, Any]) -> Answer:
    """A JSON answer (`completion(...)`, `rerank_answer(...)`)."""
    return _Entry("reply", body=body)


def streamed(chunks: list[dict[str, Any]], *, delay: float = 0.0) -> Answer:
    """A streamed answer, its chunks `delay` seconds apart."""
    return _Entry("stream", chunks=chunks, delay=delay)


def failed(status: int, message: str, *, headers: dict[str, str] | None = None) -> Answer:
    """An error with an OpenAI error body."""
    body = {"error": {"message": message, "type": "fake_error", "param": None, "code": None}}
    return _Entry("fail", body=body, status=status, headers=headers or {})


def completion(content: str | None = "", *, tool_calls: list[dict[str, Any]] | None = None,
               finish_reason: str = "stop", usage: dict[str, int] | None = None) -> dict[str, Any]:  # fmt: skip
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1,
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def chunk(delta: dict[str, Any] | None = None, *, finish_reason: str | None = None,
          usage: dict[str, int] | None = None) -> dict[str, Any]:  # fmt: skip
    """One `chat.completion.chunk`; with `usage` and no delta, the final usage-only chunk (no choices)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    frame: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                             "model": "fake", "choices": choices}  # fmt: skip
    if usage is not None:
        frame["usage"] = usage
    return frame


def rerank_answer(*results: tuple[int, float, Any], usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A Jina/Cohere-style rerank answer from `(index, relevance_score, document)` triples (document None:
    left out; a string or a `{"text": ...}` object as the provider sends it)."""
    items: list[dict[str, Any]] = []
    for index, score, document in results:
        item: dict[str, Any] = {"index": index, "relevance_score": score}
        if document is not None:
            item["document"] = document
        items.append(item)
    answer: dict[str, Any] = {"model": "fake-rerank", "results": items}
    if usage is not None:
        answer["usage"] = usage
    return answer


EMBEDDING_DIMENSIONS = 64


def embedding_of(text: str, aliases: dict[str, str] | None = None) -> list[float]:
    """A unit vector of the text's words hashed into `EMBEDDING_DIMENSIONS` buckets."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in re.findall(r"\w+", text.lower()):
        word = (aliases or {}).get(word, word)
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % EMBEDDING_DIMENSIONS] += 1.0
    norm = math.sqrt(sum(value * value for value in vector)) or 1.0
    return [value / norm for value in vector]


class FakeOpenAI:
    def __init__(self) -> None:
        self.embedding_aliases: dict[str, str] = {}
        self.embedding_failures: deque[_Entry] = deque()
        self.script: deque[_Entry] = deque()
        self.responder: Responder | None = None
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.disconnected = threading.Event()
        self.first_chunk_sent = threading.Event()
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reply(self, body: dict[str, Any]) -> None:
        self.script.append(_Entry("reply", body=body))

    def stream(self, chunks: list[dict[str, Any]], *, hold: bool = False, delay: float = 0.0) -> None:
        self.script.append(_Entry("stream", chunks=chunks, hold=hold, delay=delay))

    def stall(self, first: dict[str, Any]) -> None:
        self.script.append(_Entry("stall", chunks=[first]))

    def cut(self, chunks: list[dict[str, Any]]) -> None:
        """A stream whose connection closes after `chunks`, without `[DONE]` (a provider that went away)."""
        self.script.append(_Entry("cut", chunks=chunks))

    def fail(self, status: int, message: str, *, headers: dict[str, str] | None = None) -> None:
        self.script.append(failed(status, message, headers=headers))

    def respond_with(self, responder: Responder | None) -> None:
        """Answer the requests the script does not cover with `responder(path, body)`."""
        self.responder = responder

    def fail_embeddings(self, status: int, message: str) -> None:
        body = {"error": {"message": message, "type": "fake_error", "param": None, "code": None}}
        self.embedding_failures.append(_Entry("fail", body=body, status=status))

    def release(self) -> None:
        self._released.set()

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            fake.requests.append(body)
            fake.paths.append(self.path)
            fake.headers.append({name.lower(): value for name, value in self.headers.items()})
            if self.path.rstrip("/") == "/v1/embeddings":
                self._embeddings(body)
                return
            entry: _Entry | None = None
            if self.path.rstrip("/") in ("/v1/chat/completions", "/v1/rerank"):
                if fake.script:
                    entry = fake.script.popleft()
                elif fake.responder is not None:
                    entry = fake.responder(self.path.rstrip("/"), body)
            if entry is None:
                self._json(404, {"error": {"message": f"nothing scripted for {self.path}", "type": "fake"}})
                return
            if entry.kind in ("reply", "fail"):
                self._json(entry.status, entry.body, entry.headers)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for index, frame in enumerate(entry.chunks):
                if index and entry.delay:
                    time.sleep(entry.delay)
                self._event(json.dumps(frame))
                if index == 0:
                    fake.first_chunk_sent.set()
                    if entry.hold:
                        fake._released.wait(10)
            if entry.kind == "stall":
                if self._wait_for_disconnect(10):
                    fake.disconnected.set()
                return
            if entry.kind == "cut":
                return
            self._event("[DONE]")

        def _embeddings(self, body: dict[str, Any]) -> None:
            if fake.embedding_failures:
                failure = fake.embedding_failures.popleft()
                self._json(failure.status, failure.body)
                return
            texts = body.get("input") or []
            texts = [texts] if isinstance(texts, str) else texts
            data = [
                {"object": "embedding", "index": i, "embedding": embedding_of(text, fake.embedding_aliases)}
                for i, text in enumerate(texts)
            ]
            usage = {"prompt_tokens": sum(len(text.split()) for text in texts), "total_tokens": 0}
            self._json(200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage})

        def _event(self, data: str) -> None:
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

        def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _wait_for_disconnect(self, seconds: float) -> bool:
            conn: socket.socket = self.connection
            for _ in range(int(seconds / 0.05)):
                readable, _, _ = select.select([conn], [], [], 0.05)
                if readable:
                    try:
                        if conn.recv(1, socket.MSG_PEEK) == b"":
                            return True
                    except OSError:
                        return True
            return False

    return Handler
