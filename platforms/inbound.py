"""Platform updates in: from a verified webhook call (or a connector) to the gateway's event.

`inbound_refusal_record` counts what the webhook view refused (forged, replayed), bounded per bot and
source address: see its docstring.

`platform_update_accept` is what the webhook view and the long-lived connectors call for each update.
An update with no files is ingested at once; one with files is handed to a Celery task
(`platforms.tasks.platform_update_ingest`) so the webhook answers without waiting for downloads, and the
files are fetched there through the adapter and stored as input artifacts (`platforms.ingest`). Either way
the gateway's idempotency on `event_id` (derived by the adapter from the platform's update id) makes a
redelivered update create nothing a second time; an update already recorded is not fetched again.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from bindings.models import Bot
from gateway.envelope import EventSource
from gateway.services import EventIngestResult
from platforms.ingest import envelope_ingest
from platforms.interface import InboundRefusedError, InboundRequest, InboundUpdate
from platforms.models import InboundRefusal
from platforms.tasks import platform_update_ingest
from runners.lifecycle.retention import batched_delete
from transcripts.models import EventLog

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefusalCount:
    """A refused request as counted: how many refusals of its kind its source has had in this window (it
    included; None when the cache could not count), and whether that is past the limit (answer 429)."""

    count: int | None
    throttled: bool
    retry_after: int


def refusal_source(remote_addr: str) -> str:
    """The source refusals are counted under: the address, an IPv6 one as its /64 network (one host
    usually holds a whole /64, and would otherwise get a fresh count from each of its addresses)."""
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return remote_addr[:64]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def inbound_refusal_record(*, bot: Bot, request: InboundRequest, error: InboundRefusedError) -> RefusalCount:
    """Count one refused request in its row: one per bot, reason, source and window of
    `LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS`, logged when the row is made and when the source goes past
    `LANGBOT_INBOUND_REFUSALS_PER_WINDOW`. Up to that limit each refusal updates the row; past it the
    source is answered 429 and the row catches up once every `limit` refusals, so a flood costs a cache
    increment per request, not a write."""
    window = max(1, int(settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS))
    limit = max(1, int(settings.LANGBOT_INBOUND_REFUSALS_PER_WINDOW))
    now = timezone.now()
    start = int(now.timestamp()) // window * window
    retry_after = max(1, start + window - int(now.timestamp()))
    reason = error.reason[:16]
    source = refusal_source(request.remote_addr)
    # The bot's creation time besides its key: a row id used again (a bot deleted and made anew, a test
    # database) starts its count afresh.
    bot_key = f"{bot.pk}.{int(bot.created_at.timestamp() * 1e6) if bot.created_at else 0}"
    count = _window_count(f"platforms:inbound-refusals:{bot_key}:{reason}:{source}:{start}", timeout=2 * window)
    if count is None or count <= limit or count % limit == 0:
        created = _row_count(
            bot=bot,
            reason=reason,
            source=source,
            window_start=datetime.fromtimestamp(start, tz=UTC),
            count=count,
            message=str(error)[:500],
            now=now,
        )
        if created:
            logger.warning(
                "refused a %s request for bot %s from %s: %s (%s); more of these within %ss are counted, not logged",
                bot.platform, bot.bot_id, source, reason, error, window,
            )  # fmt: skip
    if count is not None and count == limit + 1:
        logger.warning(
            "bot %s: %s %s refusals from %s within %ss; further ones are answered 429 for %ss",
            bot.bot_id, limit + 1, reason, source, window, retry_after,
        )  # fmt: skip
    return RefusalCount(count=count, throttled=count is not None and count > limit, retry_after=retry_after)


def _window_count(key: str, *, timeout: int) -> int | None:
    """The cache's count under `key` after adding one (shared by every web process), or None when the
    cache cannot be reached: refusals are then written one by one and nobody is throttled."""
    try:
        try:
            return int(cache.incr(key))
        except ValueError:  # the window's first refusal: INCR fails on a missing key
            if cache.add(key, 1, timeout=timeout):
                return 1
            return int(cache.incr(key))
    except Exception:  # a cache outage must not turn a refusal into a 500
        return None


def _row_count(
    *,
    bot: Bot,
    reason: str,
    source: str,
    window_start: datetime,
    count: int | None,
    message: str,
    now: datetime,
) -> bool:
    """Bring the window's row up to `count` (one more when the cache could not count); True when this
    made the row."""
    rows = InboundRefusal.objects.filter(bot=bot, reason=reason, remote_addr=source, window_start=window_start)
    new_count = F("count") + 1 if count is None else Greatest(F("count"), Value(count))
    if rows.update(count=new_count, last_at=now):
        return False
    try:
        with transaction.atomic():
            InboundRefusal.objects.create(
                workspace_id=bot.workspace_id,
                bot=bot,
                platform=bot.platform,
                reason=reason,
                message=message,
                remote_addr=source,
                window_start=window_start,
                count=count or 1,
                first_at=now,
                last_at=now,
            )
    except IntegrityError:  # another process made the window's row first
        rows.update(count=new_count, last_at=now)
        return False
    return True


def inbound_refusals_purge(*, workspace_id: int, before: datetime, batch_size: int) -> int:
    """Delete the workspace's refusal rows last seen before `before` (the retention sweep's kind
    `inbound_refusals`, installed by `PlatformsConfig.ready`)."""
    return batched_delete(InboundRefusal.objects.filter(workspace_id=workspace_id, last_at__lt=before), batch_size)


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
        files = [asdict(f) for f in update.files]
        transaction.on_commit(lambda: platform_update_ingest.delay(bot.pk, envelope, files))
        return None
    return envelope_ingest(bot=bot, envelope=envelope, bot_current=bot_current)
