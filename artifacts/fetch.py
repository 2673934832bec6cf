"""The SSRF-safe fetcher of URL attachments.

A URL is fetched only when every address its host name resolves to is public, as the outbound address
guard (`foundation.outbound`) judges them: private, loopback, link-local, multicast, reserved and
unspecified addresses, and IPv6 addresses carrying one, are refused — after DNS resolution, and the
connection is then made to the checked address itself, through the guard's transport, so a second lookup
cannot be steered elsewhere (DNS rebinding). Redirects are followed by hand (at most 5), each hop checked
the same way. Only `http` and `https`; responses larger than `LANGBOT_ARTIFACT_FETCH_MAX_BYTES` are cut off
and refused. The caller says whether private addresses are allowed (the workspace's flag or the host's
`LANGBOT_ALLOW_PRIVATE_ADDRESSES`, whose older name `LANGBOT_ARTIFACT_FETCH_ALLOW_PRIVATE` still works).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx
from django.conf import settings

from foundation.outbound import addresses_refusal, guarded_transport, host_private_allowed

MAX_REDIRECTS = 5
Resolver = Callable[[str, int], list[str]]


class FetchRefusedError(Exception):
    """The URL may not or could not be fetched; the message says why (safe to show to the client)."""


@dataclass(frozen=True)
class Fetched:
    url: str
    content: bytes
    content_type: str | None
    filename: str | None


def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise FetchRefusedError(f"cannot resolve {host!r}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _checked_address(url: str, resolver: Resolver, allow_private: bool) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchRefusedError(f"only http and https URLs are fetched, not {parts.scheme or 'no'} scheme")
    host = parts.hostname
    if not host:
        raise FetchRefusedError("the URL has no host")
    if parts.username or parts.password:
        raise FetchRefusedError("URLs with credentials are not fetched")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = resolver(host, port)
    if not addresses:
        raise FetchRefusedError(f"{host!r} resolves to no address")
    refusal = None if allow_private else addresses_refusal(host, addresses)
    if refusal is not None:
        raise FetchRefusedError(f"refused, a non-public address: {refusal}")
    return host, addresses[0], port


def _filename(url: str, disposition: str | None) -> str | None:
    if disposition and "filename=" in disposition:
        name = disposition.split("filename=", 1)[1].split(";")[0].strip().strip('"')
        if name:
            return name[:255]
    tail = urlsplit(url).path.rsplit("/", 1)[-1]
    return tail[:255] or None


def url_fetch(
    url: str,
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
    allow_private: bool | None = None,
    resolver: Resolver = _resolve,
    transport: httpx.BaseTransport | None = None,
) -> Fetched:
    """Fetch `url` under the rules above; raises `FetchRefusedError`. `allow_private` defaults to the
    host-wide switch."""
    limit = max_bytes if max_bytes is not None else settings.LANGBOT_ARTIFACT_FETCH_MAX_BYTES
    allow = host_private_allowed() if allow_private is None else allow_private
    # The checked address is connected to through the guard's transport as well: one rule at both ends.
    transport = transport or guarded_transport(allow_private=allow)
    seconds = timeout if timeout is not None else settings.LANGBOT_ARTIFACT_FETCH_TIMEOUT
    current = url
    with httpx.Client(timeout=seconds, follow_redirects=False, transport=transport, trust_env=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            host, address, port = _checked_address(current, resolver, allow)
            parts = urlsplit(current)
            literal = f"[{address}]" if ":" in address else address
            # Connect to the address that was checked; Host and TLS SNI still name the original host.
            pinned = parts._replace(netloc=f"{literal}:{port}").geturl()
            headers = {"Host": parts.netloc.rsplit("@", 1)[-1]}
            extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
            try:
                with client.stream("GET", pinned, headers=headers, extensions=extensions) as response:
                    if response.is_redirect:
                        location = response.headers.get("location")
                        if not location:
                            raise FetchRefusedError("a redirect without a Location")
                        current = urljoin(current, location)
                        continue
                    if response.status_code != 200:
                        raise FetchRefusedError(f"the URL answered HTTP {response.status_code}")
                    declared = response.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > limit:
                        raise FetchRefusedError(f"the file is {declared} bytes; the limit is {limit}")
                    chunks: list[bytes] = []
                    size = 0
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > limit:
                            raise FetchRefusedError(f"the file is larger than the limit of {limit} bytes")
                        chunks.append(chunk)
                    return Fetched(
                        url=current,
                        content=b"".join(chunks),
                        content_type=response.headers.get("content-type"),
                        filename=_filename(current, response.headers.get("content-disposition")),
                    )
            except httpx.HTTPError as exc:
                raise FetchRefusedError(f"fetching the URL failed: {type(exc).__name__}") from None
    raise FetchRefusedError(f"more than {MAX_REDIRECTS} redirects")
