"""The web process closes a connection whose request body stalls (langbot_host/web.py): a client that sent
its headers and one byte of a promised body holds no socket past `LANGBOT_HTTP_REQUEST_READ_TIMEOUT`, while
requests that arrive whole, and WebSocket handshakes, are served as before. Real daphne (the Procfile's
`python -m langbot_host.web`)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

DEADLINE_SECONDS = 2
# How long the test waits for the close: far past the deadline (the server looks once, at the deadline),
# far below Twisted's own 60 s idle timeout, which would also close the socket.
PATIENCE_SECONDS = 20


def _stalled_request(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=PATIENCE_SECONDS)
    sock.sendall(
        b"POST /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{"
    )
    return sock


def _closed_after(sock: socket.socket) -> float:
    started = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_a_request_whose_body_stalls_is_cut_off_while_whole_requests_are_answered(start_web):
    web = start_web(LANGBOT_HTTP_REQUEST_READ_TIMEOUT=str(DEADLINE_SECONDS))
    parts = urlsplit(web.url)
    assert parts.hostname is not None
    assert parts.port is not None

    stalled = [_stalled_request(parts.hostname, parts.port) for _ in range(20)]
    answered = httpx.get(f"{web.url}/admin/login/", timeout=10)
    waited = [_closed_after(sock) for sock in stalled]

    assert answered.status_code == 200
    assert max(waited) < PATIENCE_SECONDS  # closed by the server, not by the test giving up
    for sock in stalled:
        sock.close()
