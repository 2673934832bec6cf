"""Which browser origins may open the chat WebSocket.

Channels' `AllowedHostsOriginValidator` (in `langbot_host.asgi`) compares only the origin's host with
`ALLOWED_HOSTS`, so a page at `http://127.0.0.1:9999` or `https://localhost` could open a socket of a host
served at `http://127.0.0.1:8000` with the visitor's session. Here the whole origin counts: scheme, host
and port must be those the socket is served at (the handshake's `Host` header, `ws` → `http`, `wss` →
`https`), or the origin must be listed in `LANGBOT_WS_ALLOWED_ORIGINS` — as the public origin must be
behind a proxy that terminates TLS, where the socket itself is served over plain `ws`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HTTP_SCHEMES = {"ws": "http", "wss": "https", "http": "http", "https": "https"}


def origin_allowed(scope: dict[str, Any]) -> bool:
    origin = _header(scope, b"origin")
    if origin is None:
        # No browser sends a handshake without an Origin; the router's validator decides for the others.
        return True
    candidate = _normalized(origin)
    if candidate is None:
        return False
    if candidate in {_normalized(o) for o in settings.LANGBOT_WS_ALLOWED_ORIGINS}:
        return True
    host = _header(scope, b"host")
    if host is None:
        # Browsers always send Host; a handshake without one (an in-process test harness) has no served
        # origin to compare with, and the router's ALLOWED_HOSTS check stands alone.
        return True
    scheme = _HTTP_SCHEMES.get(str(scope.get("scheme") or "ws"), "http")
    return candidate == _normalized(f"{scheme}://{host}")


def _normalized(origin: str) -> tuple[str, str, int] | None:
    """`(scheme, host, port)` with the scheme's default port made explicit, or None if malformed."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
