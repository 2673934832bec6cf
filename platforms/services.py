"""Writes and checks of the chat platforms that operators start from the admin: "Set the platform
webhook" and "Test connection". Both answer in words an operator reads: a platform's failure is told as
what went wrong and where ("could not reach api.telegram.org: name not resolved"), never as a Python
exception's repr."""

from __future__ import annotations

import socket
import ssl
from urllib.parse import urlsplit

import aiohttp
import httpx
from asgiref.sync import async_to_sync

from bindings.models import Bot
from foundation.outbound import AddressRefusedError
from platforms.interface import PlatformAdapter, PlatformAPIError
from platforms.registry import adapter_for_bot


class WebhookRegisterError(Exception):
    """The platform refused the webhook, or the bot's platform has no adapter; the message says which."""


class ConnectionTestError(Exception):
    """The platform refused the bot's credentials or could not be reached; the message says which, in words."""


# What a name-resolution failure says on Linux, macOS and musl: the resolver's words differ, the meaning not.
_NAME_NOT_RESOLVED = ("name or service not known", "nodename nor servname", "temporary failure in name resolution")


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes (SDKs wrap the HTTP client's error in their own, explicitly or not)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not known for known in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _host_of(chain: list[BaseException], adapter: PlatformAdapter | None) -> str:
    for error in chain:
        if isinstance(error, httpx.RequestError):
            try:
                return error.request.url.host
            except RuntimeError:  # an error raised without its request
                continue
        if isinstance(error, aiohttp.ClientConnectorError):
            return error.host
    base = adapter.api_base_url if adapter is not None else None
    return (urlsplit(base).hostname or base) if base else "the platform"


def platform_error_words(exc: BaseException, adapter: PlatformAdapter | None = None) -> str:
    """A platform call's failure as an operator reads it: a transport failure as what happened on the way
    to which host; the platform's own refusal as the adapter worded it."""
    chain = _chain(exc)
    host = _host_of(chain, adapter)
    for error in chain:
        text = str(error).lower()
        if isinstance(error, AddressRefusedError):
            return f"could not reach {host}: {error}"
        if isinstance(error, socket.gaierror) or any(words in text for words in _NAME_NOT_RESOLVED):
            return f"could not reach {host}: name not resolved"
        if isinstance(error, ConnectionRefusedError) or "connection refused" in text:
            return f"could not reach {host}: connection refused"
        if isinstance(error, ssl.SSLError) or "certificate verify failed" in text:
            return f"could not reach {host}: the TLS handshake failed"
        if isinstance(error, httpx.TimeoutException | TimeoutError) or "timed out" in text:
            return f"could not reach {host}: timed out"
        if isinstance(error, httpx.TransportError | aiohttp.ClientConnectionError | OSError):
            return f"could not reach {host}: the connection failed"
    return str(exc) or type(exc).__name__


def _run(bot: Bot, call: str, *args: str) -> tuple[PlatformAdapter, str]:
    """One adapter call (`identity`, `webhook_register`) on a short-lived adapter of the bot."""
    adapter = adapter_for_bot(bot)
    if adapter is None:
        raise PlatformAPIError(f"no adapter serves {bot.platform} bots")

    async def go() -> str:
        try:
            result: str = await getattr(adapter, call)(*args)
            return result
        finally:
            await adapter.aclose()

    try:
        return adapter, async_to_sync(go)()
    except PlatformAPIError as exc:
        raise PlatformAPIError(platform_error_words(exc, adapter)) from exc
    except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:  # an SDK that lets its client's errors through
        raise PlatformAPIError(platform_error_words(exc, adapter)) from exc


def _keep_learnt(bot: Bot, adapter: PlatformAdapter) -> None:
    # What the adapter learnt from the platform (Telegram's @name, Lark's open_id) is kept for mentions.
    if adapter.credentials != (bot.credentials or {}):
        bot.credentials = adapter.credentials
        bot.save(update_fields=["credentials", "updated_at"])


def bot_webhook_register(*, bot: Bot, url: str) -> str:
    """Point the platform at `url` for the bot's updates. Whatever the adapter learnt from the platform
    on the way (Telegram's bot username, for mentions in groups) is kept in the bot's credentials."""
    try:
        adapter, note = _run(bot, "webhook_register", url)
    except PlatformAPIError as exc:
        raise WebhookRegisterError(str(exc)) from exc
    _keep_learnt(bot, adapter)
    return note


def bot_connection_test(*, bot: Bot) -> str:
    """Call the platform's identity endpoint with the bot's credentials (Telegram getMe, Slack auth.test,
    Discord users/@me, Lark's tenant token, DingTalk / WeCom / WeChat tokens, LINE bot/info): a line
    naming the bot as the platform knows it, or `ConnectionTestError` saying what failed, in words."""
    try:
        adapter, note = _run(bot, "identity")
    except PlatformAPIError as exc:
        raise ConnectionTestError(str(exc)) from exc
    _keep_learnt(bot, adapter)
    return note
