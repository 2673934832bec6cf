"""Writes of the chat platforms that operators start (the admin's "Set the platform webhook")."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from bindings.models import Bot
from platforms.interface import PlatformAPIError
from platforms.registry import adapter_for_bot


class WebhookRegisterError(Exception):
    """The platform refused the webhook, or the bot's platform has no adapter; the message says which."""


def bot_webhook_register(*, bot: Bot, url: str) -> str:
    """Point the platform at `url` for the bot's updates. Whatever the adapter learnt from the platform
    on the way (Telegram's bot username, for mentions in groups) is kept in the bot's credentials."""
    adapter = adapter_for_bot(bot)
    if adapter is None:
        raise WebhookRegisterError(f"no adapter serves {bot.platform!r} bots")

    async def register() -> str:
        try:
            return await adapter.webhook_register(url)
        finally:
            await adapter.aclose()

    try:
        note = async_to_sync(register)()
    except PlatformAPIError as exc:
        raise WebhookRegisterError(str(exc)) from exc
    if adapter.credentials != (bot.credentials or {}):
        bot.credentials = adapter.credentials
        bot.save(update_fields=["credentials", "updated_at"])
    return note
