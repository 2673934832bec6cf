"""Long-lived platform connections: the connector process that holds them (Discord's gateway), and the
connection status of every bot that has one, which `/healthz` and the bot's admin page show.

`connectors_serve` runs each enabled bot whose adapter has a `connector_class`, starts the connector of a
bot created later, and restarts one whose credentials changed (or stops it when the bot is disabled or
deleted) — it looks at the bots every `LANGBOT_CONNECTORS_RESCAN_SECONDS`. `manage.py run_connectors`
runs it; `make run` and `make worker` start that command.

Status lives in the cache (Redis), one entry per bot: `state` (`connecting`, `connected`, `backoff` —
reconnecting after `detail`, the last error —, `error`, `stopped`; OneBot's reverse WebSocket adds
`disconnected`), `detail`, `at`. Connector entries expire `STATUS_TTL_SECONDS` after the connector process
last wrote them, so a process that died leaves no stale "connected" behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.cache import cache

from bindings.models import Bot
from platforms.inbound import platform_update_accept
from platforms.interface import InboundUpdate, PlatformConnector
from platforms.registry import adapter_class, adapter_classes, adapter_for_bot

logger = logging.getLogger(__name__)

STATUS_TTL_SECONDS = 90
STATUS_REFRESH_SECONDS = 30.0
STATUS_POLL_SECONDS = 0.2


def _status_key(bot_pk: int) -> str:
    return f"platforms:connection:{bot_pk}"


def connection_status_set(*, bot_pk: int, state: str, detail: str = "", ttl: int | None = STATUS_TTL_SECONDS) -> None:
    cache.set(_status_key(bot_pk), {"state": state, "detail": detail[:500], "at": time.time()}, ttl)


def connection_statuses(bots: Iterable[Bot]) -> dict[int, dict[str, Any]]:
    """The last known status of each bot's long-lived connection (bots without one are left out)."""
    keyed = {_status_key(bot.pk): bot.pk for bot in bots}
    found = cache.get_many(list(keyed))
    return {keyed[key]: value for key, value in found.items() if isinstance(value, dict)}


def connection_label(status: dict[str, Any] | None) -> str:
    """One line for people: `connected`, `reconnecting: <last error>`, `error: <why>`, ..."""
    if not status:
        return "unknown (no connector reported)"
    state = str(status.get("state") or "unknown")
    detail = str(status.get("detail") or "")
    if state == "backoff":
        state = "reconnecting"
    return f"{state}: {detail}" if detail else state


def connected_platforms() -> tuple[str, ...]:
    """The platforms whose bots hold a connection of the connector process."""
    return tuple(name for name, cls in adapter_classes().items() if cls.connector_class is not None)


def connection_bots(*, using: str = "default") -> list[Bot]:
    """Bots whose status is reported (the connector process's, and OneBot's reverse WebSocket ones)."""
    from platforms.adapters.onebot import OneBotAdapter

    platforms = (*connected_platforms(), OneBotAdapter.platform)
    return list(Bot.objects.using(using).filter(platform__in=platforms, enabled=True).select_related("workspace"))


@dataclass
class _Running:
    fingerprint: str
    connector: PlatformConnector
    task: asyncio.Task[None]
    reported: tuple[str, str] = ("", "")
    reported_at: float = 0.0


def _fingerprint(bot: Bot) -> str:
    return hashlib.sha256(json.dumps(bot.credentials or {}, sort_keys=True, default=str).encode()).hexdigest()


def _accepter(bot: Bot) -> Any:
    accept = database_sync_to_async(platform_update_accept)

    async def on_update(update: InboundUpdate) -> None:
        await accept(bot=bot, update=update)

    return on_update


class ConnectorSupervisor:
    """Runs the connectors of the bots that need one, on one event loop."""

    def __init__(self) -> None:
        self.running: dict[int, _Running] = {}

    def _bots(self) -> list[Bot]:
        return list(Bot.objects.filter(platform__in=connected_platforms(), enabled=True).select_related("workspace"))

    async def sync(self) -> None:
        """Start, restart and stop connectors to match the bots now."""
        bots = {bot.pk: bot for bot in await database_sync_to_async(self._bots)()}
        for pk in [pk for pk in self.running if pk not in bots]:
            await self._stop(pk)
        for pk, bot in bots.items():
            fingerprint = _fingerprint(bot)
            held = self.running.get(pk)
            if held is not None and held.fingerprint == fingerprint and not held.task.done():
                continue
            if held is not None:
                await self._stop(pk)
            cls = adapter_class(bot.platform)
            adapter = adapter_for_bot(bot)
            if cls is None or cls.connector_class is None or adapter is None:
                continue
            connector = cls.connector_class(adapter=adapter, on_update=_accepter(bot))
            task = asyncio.create_task(connector.run(), name=f"connector {bot}")
            self.running[pk] = _Running(fingerprint, connector, task)
            logger.info("connector of %s bot %s started", bot.platform, bot)

    async def _stop(self, pk: int) -> None:
        held = self.running.pop(pk)
        held.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await held.task
        await database_sync_to_async(connection_status_set)(bot_pk=pk, state="stopped", ttl=None)

    async def report(self) -> None:
        """Write each connector's status when it changed, and again before its entry would expire."""
        now = time.monotonic()
        for pk, held in self.running.items():
            status = (held.connector.state, held.connector.detail)
            if status != held.reported or now - held.reported_at >= STATUS_REFRESH_SECONDS:
                await database_sync_to_async(connection_status_set)(bot_pk=pk, state=status[0], detail=status[1])
                held.reported, held.reported_at = status, now

    async def stop_all(self) -> None:
        for pk in list(self.running):
            await self._stop(pk)


async def connectors_serve(*, stop: asyncio.Event | None = None, rescan_seconds: float | None = None) -> None:
    """Hold the connections until `stop` is set (or the task is cancelled)."""
    stop = stop or asyncio.Event()
    rescan = rescan_seconds or float(settings.LANGBOT_CONNECTORS_RESCAN_SECONDS)
    supervisor = ConnectorSupervisor()
    next_sync = 0.0
    try:
        while not stop.is_set():
            if time.monotonic() >= next_sync:
                try:
                    await supervisor.sync()
                except Exception:
                    logger.exception("the connectors could not be matched to the bots; trying again")
                next_sync = time.monotonic() + rescan
            try:
                await supervisor.report()
            except Exception as exc:  # Redis away for a moment: the connections themselves go on
                logger.warning("connection statuses could not be written: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STATUS_POLL_SECONDS):
                    await stop.wait()
    finally:
        await supervisor.stop_all()
