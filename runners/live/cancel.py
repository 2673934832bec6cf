"""How a cancel request reaches the worker that owns a running run: one Redis pub/sub channel.

Any process (web, admin, another worker) publishes `{"run_id", "reason"}` after it has committed
`Run.cancel_requested_at`; every worker listens (`CancelListener`, on its loop) and acts only on the
runs it holds. A lost message is not fatal: the heartbeat reads `cancel_requested_at` of the runs a
worker owns on every beat, so a cancel arrives within one renew interval at worst.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable

import redis
import redis.asyncio as aioredis
from django.conf import settings

logger = logging.getLogger(__name__)

_client: redis.Redis | None = None
_client_pid: int | None = None
_client_lock = threading.Lock()


def cancel_channel() -> str:
    return str(settings.LANGBOT_RUN_CANCEL_CHANNEL)


def _redis_client() -> redis.Redis:
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            _client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
            _client_pid = os.getpid()
        return _client


def cancel_notify(*, run_id: str, reason: str) -> None:
    """Tell the owning worker (whichever it is) to cancel `run_id`. Best effort, see the module doc."""
    try:
        _redis_client().publish(cancel_channel(), json.dumps({"run_id": run_id, "reason": reason}))
    except redis.RedisError:
        logger.warning("cancel of run %s not published; the owner's heartbeat will see it", run_id, exc_info=True)


class CancelListener:
    """Subscribes to the cancel channel on the worker's loop and calls `on_cancel(run_id, reason)`.
    (`runners.live.steer.SteerListener` listens the same way on its own channel.)"""

    task_name = "run-cancel-listener"

    def __init__(self, on_cancel: Callable[[str, str], None]) -> None:
        self._on_cancel = on_cancel
        self._task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()

    def channel(self) -> str:
        return cancel_channel()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._listen(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _listen(self) -> None:
        backoff = 0.5
        while True:
            client = aioredis.Redis.from_url(settings.REDIS_URL)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel())
                    self.subscribed.set()
                    backoff = 0.5
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._dispatch(message.get("data"))
            except asyncio.CancelledError:
                raise
            except Exception:
                self.subscribed.clear()
                logger.warning("%s lost Redis; retrying in %.1fs", self.task_name, backoff, exc_info=True)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
            finally:
                await client.aclose()

    def _dispatch(self, raw: object) -> None:
        try:
            payload = json.loads(raw if isinstance(raw, str | bytes) else b"")
            run_id, reason = str(payload["run_id"]), str(payload.get("reason") or "cancelled")
        except (ValueError, KeyError, TypeError):
            logger.warning("ignored a malformed cancel message: %r", raw)
            return
        self._on_cancel(run_id, reason)
