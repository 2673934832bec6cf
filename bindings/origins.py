"""Which websites may embed a web bot's chat widget (`Bot.allowed_origins`): the one check the admin form
(`BotAdminForm.clean_allowed_origins`) and the REST bots API (`bindings.services.bot_create` / `bot_update`)
both apply, so a value refused by one is refused by the other with the same words."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from django.utils.translation import gettext

from bindings.models import Bot

ALLOWED_ORIGINS_MAX = 50
_ORIGIN_DEFAULT_PORTS = {"http": 80, "https": 443}


class OriginsRefusedError(ValueError):
    """The origins given cannot be stored; `messages` says why, one line a problem."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__(" ".join(messages))
        self.messages = messages


def allowed_origin_normalized(value: str) -> str:
    """One website origin for a web bot's chat widget as stored: `scheme://host[:port]`, in lower case, without
    the scheme's default port (as `webchat.widget.origin_normalized` compares them). Raises OriginsRefusedError
    for anything else: a path, a query, credentials, a wildcard, another scheme."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        port, parts = None, None
    scheme = parts.scheme.lower() if parts else ""
    path_ok = parts is not None and parts.path in ("", "/") and not parts.query and not parts.fragment
    if parts is None or scheme not in _ORIGIN_DEFAULT_PORTS or not parts.hostname or "*" in value or not path_ok:
        raise OriginsRefusedError(
            [
                gettext(
                    "%(value)s is not a website origin such as https://www.example.com (scheme://host[:port], no path)."
                )
                % {"value": value}
            ]
        )
    if parts.username or parts.password:
        raise OriginsRefusedError(
            [gettext("%(value)s names a user; an origin is scheme://host[:port].") % {"value": value}]
        )
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port and port != _ORIGIN_DEFAULT_PORTS[scheme] else "")


def allowed_origins_normalized(values: Iterable[str], *, platform: str) -> list[str]:
    """The origins as stored: each checked and normalized, without repeats, at most `ALLOWED_ORIGINS_MAX`, and
    only for a web bot (the one kind with a widget to embed). Raises OriginsRefusedError naming every
    problem."""
    origins: list[str] = []
    problems: list[str] = []
    for value in values:
        try:
            origin = allowed_origin_normalized(value)
        except OriginsRefusedError as exc:
            problems += exc.messages
            continue
        if origin not in origins:
            origins.append(origin)
    if problems:
        raise OriginsRefusedError(problems)
    if len(origins) > ALLOWED_ORIGINS_MAX:
        raise OriginsRefusedError([gettext("At most %(max)d origins.") % {"max": ALLOWED_ORIGINS_MAX}])
    if origins and platform != Bot.Platform.WEBUI:
        raise OriginsRefusedError([gettext("Only a web bot (platform Web UI) has a chat widget to embed.")])
    return origins
