"""Celery tasks of the chat platforms. Thin: ids and JSON in, a service does the work."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from bindings.models import Bot
from platforms.ingest import platform_update_ingest as update_ingest
from platforms.interface import PlatformAPIError


# A platform that is briefly unreachable gets a few more tries (about a minute and a half in all); the
# update has been acknowledged to the platform, so nobody else will send it again.
@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(PlatformAPIError,),
    retry_backoff=3,
    retry_backoff_max=60,
    max_retries=5,
)
def platform_update_ingest(bot_pk: int, envelope: dict[str, Any], files: list[dict[str, Any]]) -> None:
    """Fetch a platform update's files and record its event (a redelivery finds the event and stops)."""
    bot = Bot.objects.select_related("workspace").filter(pk=bot_pk, enabled=True).first()
    if bot is not None:
        update_ingest(bot=bot, envelope=envelope, files=files)
