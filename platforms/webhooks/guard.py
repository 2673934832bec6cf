"""Where webhook messages may go: the guard against server-side request forgery.

An endpoint URL is the workspace's to choose, but the POST leaves from inside the deployment: without a
guard a URL could reach the host's own services (Redis, the database, a cloud metadata address). Unless
the operator allows it (`LANGBOT_WEBHOOK_ALLOW_PRIVATE`, off by default), a message goes only to public
addresses: never loopback, private, shared (carrier-grade NAT), link-local, multicast, reserved or
unspecified ones.

The check runs twice. When an endpoint is made or its URL changes, a literal address or every address its
host name resolves to is checked (`url_refusal`), so the mistake shows at once. When a message is sent,
the sender's connections go through `GuardedBackend`, which resolves the host itself, checks every address
and connects only to those it checked: a name that later resolves to a private address (DNS rebinding) is
refused before any byte leaves, and a name cannot resolve to one address for the check and another for the
connection.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

ALLOWED_SCHEMES = ("http", "https")
SETTING = "LANGBOT_WEBHOOK_ALLOW_PRIVATE"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefusedError(Exception):
    """A webhook connection refused by the guard; its message says which host and address, and why."""


def private_allowed() -> bool:
    return bool(getattr(settings, SETTING, False))


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to for a TCP connection (a literal address resolves to itself)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def address_refusal(address: str) -> str | None:
    """Why a message may not go to `address` (None when it may)."""
    try:
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "is a loopback address"
    if ip.is_link_local:
        return "is a link-local address"
    if ip.is_multicast:
        return "is a multicast address"
    if ip.is_unspecified:
        return "is the unspecified address"
    if ip.is_private:
        return "is a private address"
    if ip.is_reserved or not ip.is_global:
        return "is a reserved or non-public address"
    return None


def _refusal_of(host: str, addresses: Iterable[str]) -> str | None:
    for address in addresses:
        why = address_refusal(address)
        if why is not None:
            named = address if address == host else f"{host} resolves to {address}, which"
            return f"{named} {why}; webhooks go to public addresses only ({SETTING} is off)."
    return None


def url_refusal(url: str) -> str | None:
    """Why an endpoint may not have this URL (None when it may): only http and https, and — unless private
    addresses are allowed — a host whose every address is public. A name is resolved now."""
    parts = urlsplit(url)
    if parts.scheme not in ALLOWED_SCHEMES or not parts.hostname:
        return "Must be an http:// or https:// URL with a host."
    if private_allowed():
        return None
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "Has an invalid port."
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError):
        return f"The host {host} does not resolve."
    return _refusal_of(host, addresses)


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's blocking network backend, connecting only to addresses the guard allows. The TLS
    handshake still names the URL's host (httpcore takes it from the request), so certificates are
    verified against the name, not the address."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        if not private_allowed():
            refusal = _refusal_of(host, addresses)
            if refusal is not None:
                raise AddressRefusedError(refusal)
        failure: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} has no address")


def guarded_transport() -> httpx.HTTPTransport:
    """An httpx transport whose every connection goes through `GuardedBackend`."""
    transport = httpx.HTTPTransport()
    # httpx does not take a network backend: its connection pool's is replaced (the tests send through it).
    transport._pool._network_backend = GuardedBackend()
    return transport
