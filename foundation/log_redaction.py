"""Secrets kept out of the log, whatever the level and whichever library writes the line.

Libraries the host calls log what they send: httpx logs every request line at INFO, and a Telegram bot's
token is part of its URL path; SDKs log request options, headers or bodies at DEBUG. Asking each library
to stay quiet would be a promise broken by the next upgrade, so redaction happens where every line passes:
the log formatter (`RedactingFormatter`, installed by `settings.LOGGING`), over the whole formatted text,
traceback included.

Two nets, both needed:

- **Known values.** Every secret the host holds passes through `foundation.crypto` (encrypted at
  rest, decrypted on use), which hands each string inside it to `secret_register`; the host's own secrets
  from the environment (the secret key, runtime and metrics tokens, database and Redis passwords, the
  encryption keys) are registered when the first line is formatted. Any registered value in a line is
  replaced by the mask. Values shorter than `MIN_SECRET_LENGTH` are not registered: they would mask
  ordinary words, and a secret that short is no secret.
- **Shapes.** A secret this process never decrypted (one typed into a form, then sent before it was read
  back) is still caught when it sits where secrets sit: a Telegram bot token in a URL path, an
  `Authorization` or API-key header, a password in a URL, a token-named query parameter.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

# The same mask the APIs show for a stored secret (`foundation.crypto.SECRET_MASK`).
MASK = "********"
MIN_SECRET_LENGTH = 6
# The registry is bounded: the values are kept for redaction only, the oldest forgotten first. A host
# with more live secrets than this still has the shape net for the forgotten ones.
MAX_SECRETS = 1024
# Inside a decrypted structure, values under these keys (and URLs) are addresses and names, kept with the
# secrets only because they are configured together (a bot's `api_base_url`, an app id): not masked.
NOT_SECRET_KEYS = frozenset({"api_base_url", "base_url", "url", "username", "app_id", "client_id", "bot_id"})

_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # Telegram's Bot API: https://api.telegram.org/bot<id>:<token>/<method>
    (re.compile(r"(/bot\d+:)[A-Za-z0-9_-]+"), rf"\g<1>{MASK}"),
    # Authorization headers, as a header line, a repr'd dict or JSON.
    (
        re.compile(r"""(?i)(authorization['"]?\s*[:=]\s*['"]?(?:bearer|basic|bot|token)?\s*)[^\s'",}]+"""),
        rf"\g<1>{MASK}",
    ),
    # Headers and fields named for what they carry.
    (
        re.compile(
            r"""(?i)((?:x-api-key|api[_-]?key|x-telegram-bot-api-secret-token|secret[_-]?token|client[_-]?secret"""
            r"""|app[_-]?secret|access[_-]?token|tenant[_-]?access[_-]?token|password)['"]?\s*[:=]\s*['"]?)"""
            r"""[^\s'",}&]+"""
        ),
        rf"\g<1>{MASK}",
    ),
    # Query parameters that carry a credential.
    (
        re.compile(r"(?i)([?&](?:access_token|token|key|secret|sign|signature|password|api_key)=)[^&\s'\"]+"),
        rf"\g<1>{MASK}",
    ),
    # A password in a URL: scheme://user:password@host
    (re.compile(r"(\w+://[^/\s:@]*:)[^@\s/]+(@)"), rf"\g<1>{MASK}\g<2>"),
)


class _Registry:
    """The known secret values, and one compiled pattern over them rebuilt when they change."""

    def __init__(self) -> None:
        self._values: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None
        self._stale = False

    def add(self, value: str) -> None:
        if len(value) < MIN_SECRET_LENGTH or value == MASK:
            return
        with self._lock:
            if value in self._values:
                return
            self._values[value] = None
            while len(self._values) > MAX_SECRETS:
                self._values.popitem(last=False)
            self._stale = True

    def pattern(self) -> re.Pattern[str] | None:
        if self._stale:
            with self._lock:
                # Longest first, so a secret that contains another is masked whole.
                values = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(map(re.escape, values))) if values else None
                self._stale = False
        return self._pattern

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._pattern = None
            self._stale = False


_registry = _Registry()
_settings_registered = False


def secret_register(value: Any) -> None:
    """Remember every string inside `value` (a string, or a JSON-like structure of them) as a secret, but
    for URLs and the values of `NOT_SECRET_KEYS`."""
    if isinstance(value, str):
        if not value.startswith(("http://", "https://")):
            _registry.add(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in NOT_SECRET_KEYS:
                secret_register(item)
    elif isinstance(value, list | tuple):
        for item in value:
            secret_register(item)


def _settings_secrets() -> Iterable[str]:
    from django.conf import settings

    for name in ("SECRET_KEY", "LANGBOT_RUNTIME_TOKEN", "LANGBOT_METRICS_TOKEN", "LANGBOT_LANGBOT_RUNTIME_TOKEN"):
        value = getattr(settings, name, "")
        if isinstance(value, str):
            yield value
    yield from (key for key in getattr(settings, "LANGBOT_ENCRYPTION_KEYS", []) if isinstance(key, str))
    for database in getattr(settings, "DATABASES", {}).values():
        password = database.get("PASSWORD")
        if isinstance(password, str):
            yield password
    for name in ("REDIS_URL", "CELERY_BROKER_URL"):
        url = getattr(settings, name, "")
        if isinstance(url, str) and url:
            password = urlsplit(url).password
            if password:
                yield password


def _register_settings_once() -> None:
    global _settings_registered
    if _settings_registered:
        return
    try:
        secrets = list(_settings_secrets())
    except Exception:  # settings not configured yet: a line logged during start-up
        return
    _settings_registered = True
    for secret in secrets:
        _registry.add(secret)


def redact(text: str) -> str:
    """`text` with every known secret and every secret-shaped value replaced by the mask."""
    _register_settings_once()
    pattern = _registry.pattern()
    if pattern is not None:
        text = pattern.sub(MASK, text)
    for shape, replacement in _SHAPES:
        text = shape.sub(replacement, text)
    return text


class RedactingFormatter(logging.Formatter):
    """`logging.Formatter` whose output — message, arguments, traceback, stack — is passed through `redact`."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
