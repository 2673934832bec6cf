"""Access tokens that platforms sell for an app's id and secret (DingTalk, QQ's bot API, WeCom, WeChat): one
per (API origin, app id, hash of the secret), kept until shortly before it expires and dropped when the
platform calls it stale. Per process: every worker buys its own, which these platforms allow (a new token
does not end an older one before it expires)."""

from __future__ import annotations

import hashlib
import time

TokenKey = tuple[str, str, str]


class AccessTokens:
    def __init__(self, *, early_seconds: float) -> None:
        self.early_seconds = early_seconds
        """A token is bought again this long before it expires, so no call carries one about to lapse."""
        self._tokens: dict[TokenKey, tuple[str, float]] = {}

    @staticmethod
    def key(origin: str, app_id: str, secret: str) -> TokenKey:
        return origin, app_id, hashlib.sha256(secret.encode()).hexdigest()

    def get(self, key: TokenKey) -> str | None:
        kept = self._tokens.get(key)
        return kept[0] if kept is not None and kept[1] > time.time() else None

    def put(self, key: TokenKey, token: str, expires_in: float) -> None:
        self._tokens[key] = (token, time.time() + max(0.0, expires_in - self.early_seconds))

    def drop(self, key: TokenKey) -> None:
        self._tokens.pop(key, None)

    def clear(self) -> None:
        self._tokens.clear()
