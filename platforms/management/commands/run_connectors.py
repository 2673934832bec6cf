"""`python manage.py run_connectors`: the connector process — holds the long-lived platform connections
(Discord's gateway) of every enabled bot until SIGINT or SIGTERM (`platforms.connectors`)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from django.core.management.base import BaseCommand

from platforms.connectors import connected_platforms, connectors_serve

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Hold the long-lived chat-platform connections (Discord gateway) of the enabled bots."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--rescan", type=float, default=None, help="seconds between looks at the bots")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"connectors for: {', '.join(connected_platforms()) or 'no platform'}")
        asyncio.run(self._serve(options.get("rescan")))

    async def _serve(self, rescan: float | None) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await connectors_serve(stop=stop, rescan_seconds=rescan)
        self.stdout.write("connectors stopped")
