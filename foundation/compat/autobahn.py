"""daphne's WebSocket connections (an autobahn protocol on a Twisted transport): how much is waiting to be
sent, and a longer close handshake without protocol pings.

Relies on (daphne 4.2.3, autobahn 26.7.1, Twisted 26.10.0):
- daphne: the ASGI `send` of a connection is `functools.partial(Server.handle_reply, protocol)`, reached
  behind Channels' session middleware through `real_send` (channels 4.3.2); its first argument is the
  connection's `WebSocketProtocol`, an autobahn `WebSocketServerProtocol`;
- Twisted: the protocol's `transport` (`twisted.internet.abstract.FileDescriptor`) keeps what the socket
  has not taken yet in `dataBuffer` (bytes, of which the first `offset` are sent) plus `_tempDataLen`
  bytes not yet joined into it;
- autobahn: `closeHandshakeTimeout` is read when a close is started; the pending protocol ping and its
  timeout are the `IDelayedCall`s `autoPingPendingCall` and `autoPingTimeoutCall`, and no new ping is
  scheduled while `autoPingInterval` is 0.

Why: daphne applies no backpressure (it buffers whatever a consumer sends, without bound) and the ASGI
`send` does not wait, so the chat consumer reads the transport's backlog to stop feeding a client that
stopped reading (close 4408); and autobahn's close handshake (1 s, not an option daphne passes on) and
its pings would reset such a client's connection before it reads up to the close frame. These are
behaviours a user sees, not speed-ups. Twisted's public producer API (`registerProducer`) could replace
the backlog read; autobahn has no public way to change these timers on an open connection.
On other ASGI servers `server_protocol` is None and these functions do nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

TESTED_VERSIONS = {"daphne": "4.2.3", "autobahn": "26.7.1", "twisted": "26.10.0"}


def server_protocol(send: Any) -> Any | None:
    """daphne's protocol object of this connection, when the ASGI `send` lets us see it (None otherwise)."""
    for _ in range(4):
        if hasattr(send, "real_send"):
            send = send.real_send
        elif hasattr(send, "__self__") and hasattr(send.__self__, "real_send"):
            send = send.__self__.real_send
        else:
            break
    args = getattr(send, "args", None)
    return args[0] if args else None


def server_send_backlog(send: Any) -> int | None:
    """Bytes daphne holds unsent for this connection (what the socket would not take yet), or None when
    they cannot be seen."""
    transport = getattr(server_protocol(send), "transport", None)
    if transport is None:
        return None
    try:
        pending = len(transport.dataBuffer) - int(transport.offset) + int(transport._tempDataLen)
    except (AttributeError, TypeError):
        return None
    return max(0, pending)


def close_handshake_wait(send: Any, seconds: float) -> None:
    """Before a close this server starts: let the client `seconds` to answer it (autobahn drops the
    connection with a reset after 1 s) and stop the protocol pings, whose timeout would reset it sooner."""
    protocol = server_protocol(send)
    if protocol is None or not hasattr(protocol, "closeHandshakeTimeout"):
        return
    protocol.closeHandshakeTimeout = seconds
    for name in ("autoPingPendingCall", "autoPingTimeoutCall"):
        call = getattr(protocol, name, None)
        if call is not None:
            with contextlib.suppress(Exception):
                call.cancel()
            setattr(protocol, name, None)
    protocol.autoPingInterval = 0
