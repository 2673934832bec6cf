"""Reads of the chat platforms."""

from __future__ import annotations

from bindings.models import Bot


def bot_for_webhook(*, platform: str, workspace_slug: str, bot_id: str) -> Bot | None:
    """The enabled bot a webhook URL names, or None (also when the URL's platform is not the bot's)."""
    return (
        Bot.objects.select_related("workspace")
        .filter(workspace__slug=workspace_slug, bot_id=bot_id, platform=platform, enabled=True)
        .first()
    )
