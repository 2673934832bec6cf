"""The web process: daphne's command line with one addition, a deadline for receiving a request.

Daphne hands a request to the application only once its body has fully arrived, and until then only
Twisted's idle timeout (reset by every byte) guards the socket: a client sending headers and then a byte
now and then holds a connection, and its buffers, for as long as it likes. `Server` gives every HTTP request
`LANGBOT_HTTP_REQUEST_READ_TIMEOUT` seconds from its request line to its last body byte; a request still
incomplete then has its connection closed. WebSocket handshakes carry no body and are handed on at once.

Run it as daphne is run (the same options): `python -m langbot_host.web -b 0.0.0.0 -p 8000
langbot_host.asgi:application`. Daphne's `CommandLineInterface.server_class` is its documented way to
serve with another `Server`; only `Server`'s own connection hooks are overridden here.
"""

from __future__ import annotations

import logging
from typing import Any

from daphne.cli import CommandLineInterface
from daphne.http_protocol import WebRequest
from daphne.server import Server as DaphneServer
from django.conf import settings
from twisted.internet import reactor

logger = logging.getLogger(__name__)


class Server(DaphneServer):
    def protocol_connected(self, protocol: Any) -> None:
        super().protocol_connected(protocol)
        seconds = settings.LANGBOT_HTTP_REQUEST_READ_TIMEOUT
        if isinstance(protocol, WebRequest) and seconds > 0:
            reactor.callLater(seconds, self._request_read_deadline, protocol)

    def _request_read_deadline(self, request: WebRequest) -> None:
        connection = self.connections.get(request)
        # Received in time: the application has it (or daphne answered it, or it became a WebSocket).
        if connection is None or "application_instance" in connection or request.finished:
            return
        if request.transport is None:
            return
        logger.info("closed a connection whose request did not arrive within %ss", self.request_read_timeout)
        request.transport.abortConnection()

    @property
    def request_read_timeout(self) -> float:
        return float(settings.LANGBOT_HTTP_REQUEST_READ_TIMEOUT)


class WebCommandLine(CommandLineInterface):
    server_class = Server


if __name__ == "__main__":
    WebCommandLine.entrypoint()
