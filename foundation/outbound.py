"""The one guard for connections the host makes to an address a tenant chose (server-side request forgery).

A model provider's `base_url`, a bot's `api_base_url`, an MCP server's URL, a completion webhook's target
and a URL attachment are the workspace's to choose, but the connection leaves from inside the deployment:
without a guard such a URL reaches the host's own services (Redis, the database, the plugin runtime, a
cloud metadata address), with whatever bearer the tenant attached. So, unless an operator allowed private
addresses, a connection goes only to public addresses: never loopback, private, shared (carrier-grade
NAT), link-local (169.254.169.254 included), multicast, reserved or unspecified ones. An IPv6 address
that carries an IPv4 address (IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64) is judged by the IPv4
address inside, which is where its packets end up.

Who may reach private addresses is an operator's decision, in two places: the host-wide switch
`LANGBOT_ALLOW_PRIVATE_ADDRESSES` (its older names `LANGBOT_WEBHOOK_ALLOW_PRIVATE` and
`LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE` still work and now mean the same), and a workspace's
`allow_private_addresses` flag, editable by staff in the admin only (`bindings.selectors.
workspace_private_addresses_allowed` combines the two; callers pass the answer as `allow_private`).

The check runs twice. When a URL is saved, `url_refusal` checks a literal address or every address its
host name resolves to, so the mistake shows at once. When a connection is made, the transports of
`guarded_transport` / `guarded_async_transport` resolve the host themselves, check every address and
connect only to an address they checked: a name that resolves to a public address when saved and to a
private one later (DNS rebinding) is refused before any byte leaves, and a name cannot resolve to one
address for the check and to another for the connection. TLS still names the URL's host, so certificates
are verified against the name, not the address. `guarded_httpx2_transport` / `guarded_httpx2_async_transport`
do the same for httpx2, the fork of httpx the `openai` and `mcp` SDKs speak through.

A refused save is `URLRefusedError` (400 `address.not_allowed` naming the field, through the API's error
handler); a refused connection is `AddressRefusedError`, which the SDKs let through or wrap as their own
connection error. Neither carries more of a peer's answer than `excerpt()` keeps.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

import anyio.to_thread
import httpcore
import httpcore2
import httpx
import httpx2
from django.conf import settings

from foundation.api_errors import FieldsRefusedError
from foundation.compat.httpcore import transport2_with_backend, transport_with_backend

ALLOWED_SCHEMES = ("http", "https")
SETTING = "LANGBOT_ALLOW_PRIVATE_ADDRESSES"
# Older, narrower names of the same switch, kept so existing deployments keep their meaning.
SETTING_ALIASES = ("LANGBOT_WEBHOOK_ALLOW_PRIVATE", "LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE")
WORKSPACE_FLAG = "allow_private_addresses"
# What an API answers when it refuses a URL for its address (`ApiError(400, REFUSED_CODE, ...)`).
REFUSED_CODE = "address.not_allowed"
# How a refusal says what would allow it; safe to show to a tenant (it names no address of the host).
HOW_TO_ALLOW = (
    f"only public addresses are allowed; an operator may allow private ones for this workspace "
    f"(the workspace's {WORKSPACE_FLAG} flag, in the admin) or for the whole host ({SETTING})"
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Translation prefixes whose last bits are an IPv4 address (RFC 6052, RFC 8215).
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")


class AddressRefusedError(Exception):
    """A connection refused by the guard. The message says which host and address, why, and what would
    allow it; it is safe to show to the tenant who chose the URL."""

    code = REFUSED_CODE


def host_private_allowed() -> bool:
    """Whether the operator allowed private addresses for every workspace of this host."""
    return any(bool(getattr(settings, name, False)) for name in (SETTING, *SETTING_ALIASES))


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to for a TCP connection (a literal address resolves to itself; the
    system resolver also reads `2130706433`, `0x7f000001` and `0177.0.0.1` as 127.0.0.1)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries to its destination, if it carries one: IPv4-mapped,
    IPv4-compatible, 6to4, NAT64 (well-known and local-use prefixes) and Teredo (the client's address)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    packed = ip.packed
    if ip in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(packed[12:16])
    if ip in _NAT64_LOCAL_USE:
        # A /48 prefix puts the address's first two octets before the reserved octet 8, the rest after it.
        return ipaddress.IPv4Address(packed[6:8] + packed[9:11])
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # `::` and `::1` are themselves, not 0.0.0.0 and 0.0.0.1
        return ipaddress.IPv4Address(packed[12:16])
    return None


def _plain_refusal(ip: IPAddress) -> str | None:
    if ip.is_loopback:
        return "is a loopback address"
    if ip.is_unspecified:
        return "is the unspecified address"
    if ip.is_link_local:
        return "is a link-local address (cloud metadata services live there)"
    if ip.is_multicast:
        return "is a multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.IPv4Network("100.64.0.0/10"):
        return "is a shared (carrier-grade NAT) address"
    if ip.is_reserved:
        return "is a reserved address"
    if ip.is_private:
        return "is a private address"
    if not ip.is_global:
        return "is not a public address"
    return None


def address_refusal(address: str) -> str | None:
    """Why a connection to the IP address `address` may not be made (None when it may: a public address).
    An IPv6 address carrying an IPv4 address is judged by the IPv4 address."""
    try:
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            why = _plain_refusal(inner)
            return None if why is None else f"carries {inner}, which {why}"
    return _plain_refusal(ip)


def addresses_refusal(host: str, addresses: Iterable[str]) -> str | None:
    """Why `host`, resolving to `addresses`, may not be connected to (None when every address is public)."""
    for address in addresses:
        why = address_refusal(address)
        if why is not None:
            named = address if address == host.strip("[]") else f"{host} resolves to {address}, which"
            return f"{named} {why}; {HOW_TO_ALLOW}."
    return None


def _form_refusal(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises for a port out of range
    except ValueError:
        return "Is not a valid URL (or has an invalid port)."
    if parts.scheme not in ALLOWED_SCHEMES or not parts.hostname:
        return "Must be an http:// or https:// URL with a host."
    if parts.username or parts.password:
        return "Must not carry credentials (user:password@); send them as the API asks instead."
    return None


def _address_refusal_of_url(url: str) -> str | None:
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        addresses = resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
    except (OSError, UnicodeError):
        return f"The host {host} does not resolve."
    return addresses_refusal(host, addresses)


def url_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why a tenant may not save this URL (None when it may): an http or https URL with a host, no
    credentials and a valid port, and — unless `allow_private` — a host whose every address is public. A
    name is resolved now; a name that does not resolve is refused only when the address check applies."""
    refusal = _form_refusal(url)
    if refusal is not None or allow_private:
        return refusal
    return _address_refusal_of_url(url)


class URLRefusedError(FieldsRefusedError):
    """A URL refused when saved, naming its field: 400 `address.not_allowed` when its address is refused,
    400 `invalid_argument` when it is no usable http(s) URL at all."""

    def __init__(self, fields: dict[str, str], *, code: str = REFUSED_CODE):
        super().__init__(fields)
        self.code = code


def url_checked(url: str, *, allow_private: bool, field: str = "url") -> str:
    """`url` when a tenant may save it; raises `URLRefusedError` naming `field` otherwise."""
    refusal = _form_refusal(url)
    if refusal is not None:
        raise URLRefusedError({field: refusal}, code="invalid_argument")
    refusal = None if allow_private else _address_refusal_of_url(url)
    if refusal is not None:
        raise URLRefusedError({field: refusal})
    return url


def excerpt(text: str | bytes, limit: int = 200) -> str:
    """A short, printable excerpt of what a peer answered, for an error message: control characters
    become spaces, runs of white space one space, and at most `limit` characters are kept."""
    if isinstance(text, bytes):
        text = text[: limit * 4].decode("utf-8", errors="replace")
    flat = " ".join(_CONTROL_CHARACTERS.sub(" ", text[: limit * 4]).split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def _allowed_addresses(host: str, port: int, *, allow_private: bool, connect_error: type[Exception]) -> list[str]:
    """Every address `host` resolves to for a connection, once the guard allowed each of them. Raises the
    HTTP library's `connect_error` when the name resolves to nothing, `AddressRefusedError` when an address
    is refused. Resolved here, on each connection, so the connection goes to an address that was checked."""
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise connect_error(f"cannot resolve {host}: {exc}") from exc
    if not addresses:
        raise connect_error(f"{host} has no address")
    if not allow_private:
        refusal = addresses_refusal(host, addresses)
        if refusal is not None:
            raise AddressRefusedError(refusal)
    return addresses


# One backend per HTTP library (httpcore; httpcore2, the fork under httpx2, which the `openai` and `mcp` SDKs
# speak through) and mode: each library only knows its own base classes and error types. Each tries the
# allowed addresses in turn, as the library's own backend tries a name's addresses.


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's blocking network backend, connecting only to addresses the guard allows."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        failure: Exception | None = None
        for address in _allowed_addresses(
            host, port, allow_private=self.allow_private, connect_error=httpcore.ConnectError
        ):
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} has no address")


class GuardedAsyncBackend(httpcore.AnyIOBackend):
    """httpcore's asynchronous network backend (anyio), connecting only to addresses the guard allows.
    The name is resolved in a worker thread, as the event loop's own resolver would."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await anyio.to_thread.run_sync(
            lambda: _allowed_addresses(
                host, port, allow_private=self.allow_private, connect_error=httpcore.ConnectError
            )
        )
        failure: Exception | None = None
        for address in addresses:
            try:
                return await super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} has no address")


class GuardedBackend2(httpcore2.SyncBackend):
    """`GuardedBackend` for httpcore2."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        failure: Exception | None = None
        for address in _allowed_addresses(
            host, port, allow_private=self.allow_private, connect_error=httpcore2.ConnectError
        ):
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore2.ConnectError(f"{host} has no address")


class GuardedAsyncBackend2(httpcore2.AnyIOBackend):
    """`GuardedAsyncBackend` for httpcore2."""

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
        addresses = await anyio.to_thread.run_sync(
            lambda: _allowed_addresses(
                host, port, allow_private=self.allow_private, connect_error=httpcore2.ConnectError
            )
        )
        failure: Exception | None = None
        for address in addresses:
            try:
                return await super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore2.ConnectError(f"{host} has no address")


# httpx takes no network backend: `foundation.compat.httpcore` gives the pool it builds one.
# tests/security/test_outbound_guard.py pins that httpx still connects through it.


def guarded_transport(*, allow_private: bool, **options: object) -> httpx.HTTPTransport:
    """An httpx transport (for `httpx.Client(transport=...)`) whose every connection is checked; `options`
    are `httpx.HTTPTransport`'s own (retries, http2, ...)."""
    transport = httpx.HTTPTransport(**options)  # type: ignore[arg-type]
    return transport_with_backend(transport, GuardedBackend(allow_private=allow_private))


def guarded_async_transport(*, allow_private: bool, **options: object) -> httpx.AsyncHTTPTransport:
    """The asynchronous twin of `guarded_transport`, for `httpx.AsyncClient(transport=...)`."""
    transport = httpx.AsyncHTTPTransport(**options)  # type: ignore[arg-type]
    return transport_with_backend(transport, GuardedAsyncBackend(allow_private=allow_private))


def guarded_httpx2_transport(*, allow_private: bool) -> httpx2.HTTPTransport:
    """`guarded_transport` for httpx2 (`openai.OpenAI(http_client=openai.DefaultHttpxClient(transport=...))`)."""
    return transport2_with_backend(httpx2.HTTPTransport(), GuardedBackend2(allow_private=allow_private))


def guarded_httpx2_async_transport(*, allow_private: bool) -> httpx2.AsyncHTTPTransport:
    """`guarded_async_transport` for httpx2 (`openai.AsyncOpenAI`, the `mcp` SDK's streamable HTTP)."""
    return transport2_with_backend(httpx2.AsyncHTTPTransport(), GuardedAsyncBackend2(allow_private=allow_private))
