"""Celery tasks of the chat platforms. Thin: ids and JSON in, a service does the work."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(acks_late=True, ignore_result=True)
def platform_update_ingest(bot_pk: int, envelope: dict[str, Any], files: list[dict[str, Any]]) -> None:
    """Fetch a platform update's files and record its event (a redelivery finds the event and stops)."""
    from bindings.models import Bot
    from platforms.inbound import platform_update_ingest as ingest

    bot = Bot.objects.select_related("workspace").filter(pk=bot_pk, enabled=True).first()
    if bot is not None:
        ingest(bot=bot, envelope=envelope, files=files)
