"""A platform update's envelope to the gateway's event: at once (`envelope_ingest`, for an update without
files), or after its files were fetched through the bot's adapter and stored as input artifacts
(`platform_update_ingest`, which the Celery task of the same name runs).

`platforms.inbound` decides which; this module knows nothing of webhooks, connectors or tasks.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from pydantic import ValidationError

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from gateway.envelope import EventEnvelopeIn
from gateway.services import EventIngestResult, EventRefusedError, event_ingest, event_unanswered_chatter
from platforms.interface import PlatformFileRef
from platforms.registry import adapter_for_bot
from transcripts.models import EventLog

logger = logging.getLogger(__name__)


def envelope_ingest(*, bot: Bot, envelope: dict[str, Any], bot_current: bool) -> EventIngestResult | None:
    """The update's envelope as the gateway's event (None when it cannot become one: logged)."""
    try:
        parsed = EventEnvelopeIn.model_validate(envelope)
        return event_ingest(workspace=bot.workspace, envelope=parsed, bot=bot if bot_current else None)
    except (ValidationError, EventRefusedError) as exc:
        # Answering the platform with an error would only make it redeliver the same update.
        logger.warning("bot %s: an update could not become an event: %s", bot.bot_id, exc)
        return None


def _unanswered_chatter(bot: Bot, envelope: dict[str, Any]) -> bool:
    try:
        parsed = EventEnvelopeIn.model_validate(envelope)
    except ValidationError:
        return False  # refused, and logged, by `envelope_ingest`
    return event_unanswered_chatter(workspace=bot.workspace, envelope=parsed)


def platform_update_ingest(
    *, bot: Bot, envelope: dict[str, Any], files: list[dict[str, Any]]
) -> EventIngestResult | None:
    """Fetch an update's files through the bot's adapter, store them as input artifacts, ingest the event.
    Raises `PlatformAPIError` when the platform could not give a file (the task tries again)."""
    event_id = envelope.get("event_id")
    if EventLog.objects.filter(workspace_id=bot.workspace_id, event_id=event_id).exists():
        return None
    if _unanswered_chatter(bot, envelope):
        return None  # a group message no binding answers: its files are not fetched, nothing is recorded
    adapter = adapter_for_bot(bot)
    if adapter is None:
        return None
    limit = int(settings.LANGBOT_ARTIFACT_FETCH_MAX_BYTES)
    # A file the platform says is too large is not downloaded; its handle stays in `data.platform_files`.
    refs = [ref for ref in (PlatformFileRef(**f) for f in files) if ref.size is None or ref.size <= limit]

    async def fetch_all() -> list[Any]:
        try:
            return [await adapter.fetch_file(ref) for ref in refs]
        finally:
            await adapter.aclose()

    fetched = async_to_sync(fetch_all)()
    attachments = list((envelope.get("input") or {}).get("attachments") or [])
    for ref, file in zip(refs, fetched, strict=True):
        if len(file.data) > limit:
            continue
        artifact = artifact_create_from_bytes(
            workspace=bot.workspace,
            data=file.data,
            name=file.name or ref.name or "attachment",
            mime_type=file.mime_type or ref.mime_type,
            conversation_id="",
            source=Artifact.Source.INPUT,
        )
        attachments.append({"artifact_id": str(artifact.artifact_id)})
    envelope = {**envelope, "input": {**(envelope.get("input") or {}), "attachments": attachments}}
    envelope["data"] = {**(envelope.get("data") or {}), "platform_files": [f["ref"] for f in files]}
    return envelope_ingest(bot=bot, envelope=envelope, bot_current=False)
