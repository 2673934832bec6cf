"""DRF authentication by workspace API key: `Authorization: Bearer lbk_<prefix>_<secret>`.

Every API request authenticates, so a key found in the database is kept per process for
`LANGBOT_API_KEY_CACHE_SECONDS` (keyed by the SHA-256 of the whole key, never the key itself): a busy
integration then pays no database round trip for its key. The price is that revoking a key, or changing
its operator scope, reaches each web process within that many seconds rather than at once; 0 turns the
cache off. A key that is not found is never kept, so a new key works at once.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from bindings.models import ApiKey, Workspace
from bindings.selectors import api_key_by_plaintext


@dataclass(frozen=True)
class ApiKeyPrincipal:
    """The caller behind an API key: a workspace, not a person."""

    api_key: ApiKey

    is_authenticated = True
    is_active = True
    is_staff = False

    @property
    def workspace(self) -> Workspace:
        return self.api_key.workspace

    def __str__(self) -> str:
        return f"api-key:{self.api_key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be `Bearer <api key>`.")
        api_key = _api_key_lookup(header[1].decode(errors="replace"))
        if api_key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        # Touch at most once a minute: a hot key must not turn every request into a write.
        now = timezone.now()
        if api_key.last_used_at is None or (now - api_key.last_used_at).total_seconds() > 60:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
            # The kept instance remembers the write, so the other requests of the minute skip it.
            api_key.last_used_at = now
        return ApiKeyPrincipal(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'


# digest of the whole key -> (monotonic expiry, key). Plain dict operations are atomic under the GIL, and
# two threads missing together both read the database, which is harmless.
_CACHE_MAX_KEYS = 4096
_cache: dict[bytes, tuple[float, ApiKey]] = {}


def _api_key_lookup(key: str) -> ApiKey | None:
    seconds = float(getattr(settings, "LANGBOT_API_KEY_CACHE_SECONDS", 0) or 0)
    if seconds <= 0:
        return api_key_by_plaintext(key=key)
    digest = hashlib.sha256(key.encode()).digest()
    now = time.monotonic()
    kept = _cache.get(digest)
    if kept is not None and kept[0] > now:
        return kept[1]
    api_key = api_key_by_plaintext(key=key)
    if api_key is None:
        _cache.pop(digest, None)
        return None
    if len(_cache) >= _CACHE_MAX_KEYS:
        for stale in [d for d, (expiry, _) in list(_cache.items()) if expiry <= now]:
            _cache.pop(stale, None)
        if len(_cache) >= _CACHE_MAX_KEYS:
            _cache.clear()
    _cache[digest] = (now + seconds, api_key)
    return api_key
