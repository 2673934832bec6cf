"""`GET /healthz`: whether the database, Redis, the broker and the plugin runtime answer right now."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connections
from django.http import HttpRequest, JsonResponse
from kombu import Connection as BrokerConnection

from langbot_sdk.protocol import Action
from platforms.connectors import connection_bots, connection_label, connection_statuses
from runtimes.link import runtime_link

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_SECONDS = 2
# The database alias of the health check (settings: same database, no pool), so that requests holding
# every pooled connection do not make the check wait for one.
HEALTH_DATABASE = "health"


def _database() -> None:
    connection = connections[HEALTH_DATABASE]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        connection.close()


def _redis() -> None:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=CHECK_TIMEOUT_SECONDS, socket_timeout=CHECK_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    finally:
        client.close()


def _broker() -> None:
    with BrokerConnection(settings.CELERY_BROKER_URL, connect_timeout=CHECK_TIMEOUT_SECONDS) as broker:
        broker.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT_SECONDS)


def _runtime() -> None:
    # The probe says "down" at once rather than waiting for a runtime that is being restarted.
    runtime_link().call_sync(Action.PING, {}, timeout=CHECK_TIMEOUT_SECONDS, connect_wait=0)


CHECKS: dict[str, Callable[[], None]] = {
    "database": _database,
    "redis": _redis,
    "broker": _broker,
    "runtime": _runtime,
}


def healthz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    for name, check in CHECKS.items():
        try:
            check()
        except Exception as exc:  # a health probe reports every failure instead of raising it
            logger.warning("health check %s failed: %s", name, exc)
            checks[name] = f"error: {type(exc).__name__}"
        else:
            checks[name] = "ok"
    healthy = all(value == "ok" for value in checks.values())
    body: dict[str, object] = {"status": "ok" if healthy else "degraded", "checks": checks}
    # Each bot's long-lived platform connection (Discord's gateway, OneBot's reverse WebSocket), for people
    # to read: a bot with a revoked token does not make the host unhealthy.
    try:
        try:
            bots = connection_bots(using=HEALTH_DATABASE)
        finally:
            connections[HEALTH_DATABASE].close()
        statuses = connection_statuses(bots)
        if bots:
            body["connections"] = {
                f"{bot.platform}/{bot.workspace.slug}/{bot.bot_id}": connection_label(statuses.get(bot.pk))
                for bot in bots
            }
    except Exception as exc:  # the database or Redis is down: the checks above say so already
        logger.warning("platform connections could not be read: %s", exc)
    return JsonResponse(body, status=200 if healthy else 503)
