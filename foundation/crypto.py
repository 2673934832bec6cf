"""Encryption at rest for secrets (runner config secrets, bot credentials): Fernet keys and a model field.

`LANGBOT_ENCRYPTION_KEYS` is a list of Fernet keys. The first key encrypts; every key decrypts, so a key
is rotated by putting a new one first, running `python manage.py rotate_encryption_keys` (which
re-encrypts every stored secret with the first key) and then dropping the old key. Without any key the
host derives one from `SECRET_KEY` and logs a warning: secrets are then only as safe as that key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django import forms
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

from foundation.log_redaction import secret_register

logger = logging.getLogger(__name__)

# What APIs and admin forms show instead of a secret; sending it back means "keep the stored value".
SECRET_MASK = "********"


# `scripts/run_stack.py` prints the same advice once for all the processes of `make run`.
ENCRYPTION_KEYS_MISSING = (
    "LANGBOT_ENCRYPTION_KEYS is not set: secrets are encrypted with a key derived from DJANGO_SECRET_KEY "
    "(fine on your own machine). For a deployment, set LANGBOT_ENCRYPTION_KEYS (in .env) to a key made by "
    '`python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"` before '
    "storing secrets."
)


class SecretDecryptionError(Exception):
    """A stored secret cannot be decrypted with any configured key (a key was dropped too early)."""


def _derived_key(secret_key: str) -> bytes:
    digest = hashlib.sha256(b"langbot-host encryption key\x00" + secret_key.encode()).digest()
    return base64.urlsafe_b64encode(digest)


@lru_cache(maxsize=4)
def _multi_fernet(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        if not getattr(settings, "LANGBOT_ENCRYPTION_KEYS_NOTED", False):
            logger.warning(ENCRYPTION_KEYS_MISSING)
        return MultiFernet([Fernet(_derived_key(secret_key))])
    fernets = []
    for index, key in enumerate(keys):
        try:
            fernets.append(Fernet(key.encode()))
        except (ValueError, TypeError) as exc:
            raise ImproperlyConfigured(
                f"LANGBOT_ENCRYPTION_KEYS[{index}] is not a Fernet key (32 url-safe base64-encoded bytes): {exc}"
            ) from None
    return MultiFernet(fernets)


def encryption() -> MultiFernet:
    """The MultiFernet for the configured keys (read on every call, so settings overrides apply)."""
    keys = tuple(k for k in getattr(settings, "LANGBOT_ENCRYPTION_KEYS", []) if k)
    return _multi_fernet(keys, settings.SECRET_KEY)


def encrypt_text(plaintext: str) -> str:
    return encryption().encrypt(plaintext.encode()).decode("ascii")


def decrypt_text(token: str) -> str:
    try:
        return encryption().decrypt(token.encode("ascii")).decode()
    except (InvalidToken, UnicodeEncodeError):
        raise SecretDecryptionError(
            "a stored secret cannot be decrypted with any key in LANGBOT_ENCRYPTION_KEYS"
        ) from None


def generate_key() -> str:
    """A new Fernet key, for `LANGBOT_ENCRYPTION_KEYS`."""
    return Fernet.generate_key().decode("ascii")


def _registered(value: Any) -> Any:
    """`value`, its strings now known to the log's redaction (`foundation.log_redaction`)."""
    secret_register(value)
    return value


class EncryptedJSONField(models.Field[Any, Any]):
    """A JSON value stored as one Fernet token in a text column.

    The value cannot be filtered on. Saving re-encrypts with the current first key, which is all that
    key rotation needs.
    """

    description = "JSON encrypted at rest"

    def get_internal_type(self) -> str:
        return "TextField"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        return _registered(json.loads(decrypt_text(value)))

    def to_python(self, value: Any) -> Any:
        # A string is a token (loaddata of what `value_to_string` wrote); anything else is the value.
        if isinstance(value, str):
            return _registered(json.loads(decrypt_text(value)))
        return value

    def get_prep_value(self, value: Any) -> Any:
        if value is None:
            return None
        # A secret saved by this process may be used before it is ever read back: known from here on.
        return encrypt_text(json.dumps(_registered(value), ensure_ascii=False, sort_keys=True))

    def value_to_string(self, obj: models.Model) -> str:
        # Fixtures/dumpdata get the token, never the plaintext.
        return str(self.get_prep_value(self.value_from_object(obj)))

    def formfield(self, form_class: Any = None, choices_form_class: Any = None, **kwargs: Any) -> forms.Field | None:
        # Editing happens through purpose-built form fields that mask the value.
        return None
