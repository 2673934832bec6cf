"""The outbound guard for MCP's streamable HTTP, which the `mcp` SDK speaks through `httpx2` (a fork of httpx
on `httpcore2`) rather than httpx: the same rule as `langbot_host.core.outbound`, on httpx2's transport.

Every connection resolves the server's host itself, checks every address with the host's one
`address_refusal`, and connects only to an address it checked (a name cannot resolve to a public address
for the check and to a private one for the connection). TLS still names the URL's host. A refusal raises
`AddressRefusedError` with the same words as the httpx guard's.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio.to_thread
import httpcore2
import httpx2

from langbot_host.core.outbound import HOW_TO_ALLOW, AddressRefusedError, address_refusal, resolve


def _checked(host: str, addresses: list[str], *, allow_private: bool) -> list[str]:
    if not addresses:
        raise httpcore2.ConnectError(f"{host} has no address")
    if allow_private:
        return addresses
    for address in addresses:
        why = address_refusal(address)
        if why is not None:
            named = address if address == host.strip("[]") else f"{host} resolves to {address}, which"
            raise AddressRefusedError(f"{named} {why}; {HOW_TO_ALLOW}.")
    return addresses


class GuardedAsyncBackend(httpcore2.AnyIOBackend):
    """httpcore2's asynchronous network backend, connecting only to addresses the guard allows; the name is
    resolved in a worker thread, as the event loop's own resolver would."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            resolved = await anyio.to_thread.run_sync(lambda: resolve(host, port))
        except (OSError, UnicodeError) as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from exc
        failure: Exception | None = None
        for address in _checked(host, resolved, allow_private=self.allow_private):
            try:
                return await super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore2.ConnectError(f"{host} has no address")


def mcp_guarded_transport(*, allow_private: bool) -> httpx2.AsyncHTTPTransport:
    """An httpx2 transport whose every connection is checked. httpx2 takes no network backend, but its
    transport keeps the connection pool it builds, and the pool hands its backend to every connection it
    opens: the backend is replaced right after the pool is built (tests/resources/test_mcp_outbound.py pins
    that httpx2 still connects through it). A client given a transport mounts no proxy from the
    environment, so no proxy makes a connection the guard cannot see."""
    transport = httpx2.AsyncHTTPTransport()
    transport._pool._network_backend = GuardedAsyncBackend(allow_private=allow_private)
    return transport
