"""foundation.compat.autobahn against the installed daphne, autobahn and Twisted: the connection's protocol is
found from the ASGI send, its unsent backlog is counted, and a close waits as long as asked without pings."""

from __future__ import annotations

import asyncio
import base64
import os
from functools import partial
from typing import Any, cast

import pytest
from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from channels.sessions import InstanceSessionWrapper
from daphne.server import Server
from twisted.internet.abstract import FileDescriptor
from twisted.internet.testing import StringTransport

from foundation.compat import autobahn as compat
from tests.compat.pins import assert_pinned


@pytest.mark.parametrize("distribution", sorted(compat.TESTED_VERSIONS))
def test_the_socket_stack_is_the_version_the_compat_module_was_checked_against(distribution: str) -> None:
    assert_pinned(distribution, checked=compat.TESTED_VERSIONS[distribution], module="foundation/compat/autobahn.py")


def test_channels_is_the_version_the_compat_module_was_checked_against() -> None:
    assert_pinned("channels", checked="4.3.2", module="foundation/compat/autobahn.py")


def test_the_protocol_is_found_from_the_send_daphne_gives_behind_the_session_middleware() -> None:
    protocol = object()
    sends: list[Any] = []

    async def application(*, scope: dict[str, Any], receive: Any, send: Any) -> None:
        sends.append(InstanceSessionWrapper({"cookies": {}}, send).send)

    async def scenario() -> None:
        server: Any = Server.__new__(Server)  # only create_application is used: no endpoints, no reactor
        server.connections = {protocol: {}}
        server.application = application
        server.create_application(protocol, {"type": "websocket"})
        await server.connections[protocol]["application_instance"]

    asyncio.run(scenario())
    assert compat.server_protocol(sends[0]) is protocol
    assert compat.server_protocol(lambda message: None) is None


class _Reactor:
    # Twisted's interface names; nothing runs a loop here, so writes wait for `doWrite()`.
    def addWriter(self, _: object) -> None: ...  # noqa: N802
    def removeWriter(self, _: object) -> None: ...  # noqa: N802


class _SlowSocket(FileDescriptor):
    """A transport whose socket takes `takes` bytes per write event."""

    takes = 300

    def writeSomeData(self, data: bytes) -> int:  # noqa: N802 -- Twisted's name
        return min(len(data), self.takes)


class _Connection:
    def __init__(self, transport: Any) -> None:
        self.transport = transport


def test_the_backlog_counts_what_the_socket_has_not_taken() -> None:
    transport = _SlowSocket(reactor=cast(Any, _Reactor()))
    transport.connected = True
    send = partial(Server.__new__(Server).handle_reply, _Connection(transport))

    assert compat.server_send_backlog(send) == 0
    transport.write(b"x" * 1000)
    transport.write(b"y" * 24)
    assert compat.server_send_backlog(send) == 1024
    transport.doWrite()
    assert compat.server_send_backlog(send) == 724
    transport.write(b"z" * 10)
    assert compat.server_send_backlog(send) == 734


def _open_protocol() -> tuple[WebSocketServerProtocol, StringTransport]:
    factory = WebSocketServerFactory("ws://localhost:9000")
    factory.protocol = WebSocketServerProtocol
    factory.setProtocolOptions(autoPingInterval=10, autoPingTimeout=5)
    protocol = cast(WebSocketServerProtocol, factory.buildProtocol(None))
    transport = StringTransport()
    protocol.makeConnection(cast(Any, transport))
    key = base64.b64encode(os.urandom(16)).decode()
    protocol.dataReceived(
        (
            "GET / HTTP/1.1\r\nHost: localhost:9000\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    assert transport.value().startswith(b"HTTP/1.1 101")
    return protocol, transport


def test_a_close_started_here_waits_as_long_as_asked_and_pings_stop() -> None:
    protocol, _ = _open_protocol()
    pending = protocol.autoPingPendingCall
    assert pending is not None  # autobahn scheduled its next ping
    send = partial(Server.__new__(Server).handle_reply, protocol)

    compat.close_handshake_wait(send, 30.0)
    protocol.sendClose(code=4408)

    assert protocol.autoPingPendingCall is None
    assert protocol.autoPingTimeoutCall is None
    assert protocol.autoPingInterval == 0
    assert protocol.closeHandshakeTimeout == 30.0
    assert protocol.closeHandshakeTimeoutCall is not None
    protocol.closeHandshakeTimeoutCall.cancel()


def test_autobahn_reads_the_close_timeout_when_the_close_starts() -> None:
    # A timeout of 0 means no timer at all: proof that the value set on the open connection is the one used.
    protocol, _ = _open_protocol()
    compat.close_handshake_wait(partial(Server.__new__(Server).handle_reply, protocol), 0)
    protocol.sendClose(code=4408)
    assert protocol.closeHandshakeTimeoutCall is None
