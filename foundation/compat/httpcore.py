"""httpx and httpx2 transports: choosing the network backend of the connection pool they build.

Relies on (httpx 0.28.1 over httpcore 1.0.9; httpx2 2.16.2 over httpcore2 2.16.2):
- `HTTPTransport` / `AsyncHTTPTransport` keep the connection pool they build in `_pool` (an
  `httpcore.ConnectionPool`, or an `HTTPProxy` / `SOCKSProxy` pool when a proxy applies; httpcore2's
  twins for httpx2);
- that pool keeps its network backend in `_network_backend` and hands it to every connection it opens
  (`connect_tcp` is called on it for each new connection, after any earlier replacement).

Why: the outbound guard (`foundation.outbound`) must see and check the address every connection goes to.
httpcore's pools take a `network_backend=` argument, but httpx builds its pool itself and passes none;
writing a transport of our own around a pool we build would copy httpx's request and error mapping. This
is a security guard, not a speed-up: it stays until httpx takes a backend.
"""

from __future__ import annotations

from typing import TypeVar

import httpcore
import httpcore2
import httpx
import httpx2

TESTED_VERSIONS = {"httpx": "0.28.1", "httpcore": "1.0.9", "httpx2": "2.16.2", "httpcore2": "2.16.2"}

Transport = TypeVar("Transport", httpx.HTTPTransport, httpx.AsyncHTTPTransport)
Transport2 = TypeVar("Transport2", httpx2.HTTPTransport, httpx2.AsyncHTTPTransport)


def transport_with_backend(
    transport: Transport, backend: httpcore.NetworkBackend | httpcore.AsyncNetworkBackend
) -> Transport:
    """`transport` (just built, no connection made yet), opening its connections through `backend`."""
    transport._pool._network_backend = backend  # type: ignore[assignment]
    return transport


def transport2_with_backend(
    transport: Transport2, backend: httpcore2.NetworkBackend | httpcore2.AsyncNetworkBackend
) -> Transport2:
    """`transport_with_backend` for httpx2 and httpcore2."""
    transport._pool._network_backend = backend  # type: ignore[assignment]
    return transport
