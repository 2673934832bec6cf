"""The form of a workspace's API keys (`lbk_<prefix>_<secret>`) and the digest stored in place of the
secret: shared by the service that issues keys and the selector that checks them."""

from __future__ import annotations

import hashlib

API_KEY_PREFIX = "lbk"


def api_key_secret_digest(secret: str) -> str:
    # Keys carry 256 bits of entropy, so a plain digest is enough; a slow KDF would only slow every request.
    return hashlib.sha256(secret.encode()).hexdigest()
