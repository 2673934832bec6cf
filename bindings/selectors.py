"""Reads for workspaces and API keys."""

from __future__ import annotations

import hmac

from bindings.models import ApiKey
from bindings.services import API_KEY_PREFIX, api_key_secret_digest


def api_key_by_plaintext(*, key: str) -> ApiKey | None:
    """The active key matching `key`, or None. Comparison is constant-time."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX:
        return None
    _, prefix, secret = parts
    api_key = (
        ApiKey.objects.select_related("workspace").filter(prefix=prefix, revoked_at__isnull=True).first()
    )
    if api_key is None or not hmac.compare_digest(api_key.secret_sha256, api_key_secret_digest(secret)):
        return None
    return api_key
