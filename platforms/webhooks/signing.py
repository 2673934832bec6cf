"""Standard Webhooks signing: endpoint secrets (`whsec_<base64>`) and the three headers of a message.

The `standardwebhooks` library computes the signatures; this module only decides which secrets sign (the
current one, and the previous one until its grace period ends) and puts them in one header, as the
specification allows, so a receiver holding either secret verifies the message.
"""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
# The specification recommends secrets of 24 to 64 random bytes.
SECRET_MIN_BYTES, SECRET_MAX_BYTES = 24, 64


def secret_generate() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_problem(value: str) -> str | None:
    """Why `value` is not a usable endpoint secret, or None."""
    if not value.startswith(SECRET_PREFIX):
        return f"Must start with {SECRET_PREFIX}."
    try:
        key = base64.b64decode(value[len(SECRET_PREFIX) :], validate=True)
    except ValueError:
        return f"Must be {SECRET_PREFIX} followed by base64."
    if not SECRET_MIN_BYTES <= len(key) <= SECRET_MAX_BYTES:
        return f"Must hold {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} bytes of key."
    return None


def signed_headers(*, message_id: str, body: str, secrets_: list[str], at: datetime | None = None) -> dict[str, str]:
    """The `webhook-id`, `webhook-timestamp` and `webhook-signature` headers of `body`, signed now by each
    of `secrets_` (space-separated signatures)."""
    moment = (at or datetime.now(UTC)).astimezone(UTC)
    signatures = " ".join(Webhook(secret).sign(message_id, moment, body) for secret in secrets_)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signatures,
    }
