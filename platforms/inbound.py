"""Platform updates in: from a verified webhook call (or a connector) to the gateway's event.

`platform_update_accept` is what the webhook view and the long-lived connectors call for each update.
An update with no files is ingested at once; one with files is handed to a Celery task
(`platforms.tasks.platform_update_ingest`) so the webhook answers without waiting for downloads, and the
files are fetched there through the adapter and stored as input artifacts. Either way the gateway's
idempotency on `event_id` (derived by the adapter from the platform's update id) makes a redelivered
update create nothing a second time; an update already recorded is not fetched again.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from pydantic import ValidationError

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from bindings.models import Bot
from platforms.interface import InboundRefusedError, InboundRequest, InboundUpdate, PlatformFileRef
from platforms.models import InboundRefusal
from platforms.registry import adapter_for_bot
from runners.gateway.envelope import EventEnvelopeIn, EventSource
from runners.gateway.services import EventIngestResult, EventRefusedError, event_ingest
from transcripts.models import EventLog

logger = logging.getLogger(__name__)


def inbound_refusal_record(*, bot: Bot, request: InboundRequest, error: InboundRefusedError) -> None:
    InboundRefusal.objects.create(
        workspace_id=bot.workspace_id,
        bot=bot,
        platform=bot.platform,
        reason=error.reason[:16],
        message=str(error)[:500],
        remote_addr=request.remote_addr[:64],
    )
    logger.warning("refused a %s request for bot %s: %s (%s)", bot.platform, bot.bot_id, error.reason, error)


def _envelope(bot: Bot, envelope: dict[str, Any]) -> dict[str, Any]:
    return {**envelope, "bot_id": bot.bot_id, "source": EventSource.PLATFORM.value}


def platform_update_accept(*, bot: Bot, update: InboundUpdate, bot_current: bool = False) -> EventIngestResult | None:
    """Ingest one update (None when it went to the file-fetching task, or could not become an event).

    `bot_current` says the caller read `bot` for this request (a webhook), so the gateway need not read it
    again; a long-lived connection's bot may have been disabled since, and is read again."""
    envelope = _envelope(bot, update.envelope)
    if update.files:
        if EventLog.objects.filter(workspace_id=bot.workspace_id, event_id=envelope.get("event_id")).exists():
            return None  # redelivered: its files were fetched, or are being fetched, the first time
        from platforms.tasks import platform_update_ingest

        files = [asdict(f) for f in update.files]
        transaction.on_commit(lambda: platform_update_ingest.delay(bot.pk, envelope, files))
        return None
    return _ingest(bot, envelope, bot_current=bot_current)


def _ingest(bot: Bot, envelope: dict[str, Any], *, bot_current: bool) -> EventIngestResult | None:
    try:
        parsed = EventEnvelopeIn.model_validate(envelope)
        return event_ingest(workspace=bot.workspace, envelope=parsed, bot=bot if bot_current else None)
    except (ValidationError, EventRefusedError) as exc:
        # Answering the platform with an error would only make it redeliver the same update.
        logger.warning("bot %s: an update could not become an event: %s", bot.bot_id, exc)
        return None


def platform_update_ingest(
    *, bot: Bot, envelope: dict[str, Any], files: list[dict[str, Any]]
) -> EventIngestResult | None:
    """Fetch an update's files through the bot's adapter, store them as input artifacts, ingest the event.
    Raises `PlatformAPIError` when the platform could not give a file (the task tries again)."""
    event_id = envelope.get("event_id")
    if EventLog.objects.filter(workspace_id=bot.workspace_id, event_id=event_id).exists():
        return None
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
    return _ingest(bot, envelope, bot_current=False)
