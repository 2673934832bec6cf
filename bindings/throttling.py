"""REST throttling per caller (docs/architecture.md, "The REST API": 429 `rate_limited` with `Retry-After`).

Each API key (or, for browser sessions, each user) gets `LANGBOT_API_THROTTLE_RATE` requests per period,
counted in the Django cache (Redis in production, shared by every web process). The count is a fixed
window kept as one cache counter: DRF's own `SimpleRateThrottle` stores every request's timestamp in one
cache value, which at the rates an integration reaches (hundreds a second) would read and rewrite a list
of thousands of floats on every request.

With Django's Redis cache backend the counter goes to Redis directly, through one client kept per process
(`_redis_counter`), as one pipeline (INCR, then EXPIRE NX): Django's `caches` are per request context, so
its Redis backend opened a new connection (connect, SELECT, two CLIENT SETINFO) for every request's
count, and its `incr` asks EXISTS before INCRBY. The key is the one Django's cache would use.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import redis
from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.base import default_key_func
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from bindings.authentication import ApiKeyPrincipal

if TYPE_CHECKING:  # DRF imports this module while `rest_framework.views` is still initialising
    from rest_framework.views import APIView

logger = logging.getLogger(__name__)


class ApiKeyRateThrottle(SimpleRateThrottle):
    scope = "api_key"

    def get_rate(self) -> str | None:
        # Read per request, not once at import as DRF's default does, so an operator's setting (and a
        # test's) applies. Empty or "off" turns throttling off.
        rate = str(getattr(settings, "LANGBOT_API_THROTTLE_RATE", "") or "").strip()
        return None if rate.lower() in {"", "off", "none"} else rate

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        user = request.user
        if isinstance(user, ApiKeyPrincipal):
            return f"throttle:key:{user.api_key.prefix}"
        if user is not None and user.is_authenticated:
            return f"throttle:user:{user.pk}"
        return None  # refused by authentication anyway

    def allow_request(self, request: Request, view: APIView) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        allowed, duration = self.parse_rate(self.rate)
        if allowed is None or duration is None:
            return True
        window = int(time.time() // duration)
        self._window_ends = (window + 1) * duration
        counter = f"{key}:{window}"
        try:
            count = _increment(counter, timeout=duration * 2)
        except Exception:  # a cache outage must not take the API down with it
            logger.warning("throttle cache unavailable; request let through", exc_info=True)
            return True
        return count <= allowed

    def wait(self) -> float | None:
        return max(1.0, self._window_ends - time.time())


_REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"
_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def _redis_counter(config: dict[str, Any]) -> redis.Redis | None:
    """This process's client of the default cache's Redis, or None when the cache is not Redis (tests' and
    a deployment's other backends go through Django's cache API). Kept per location, so a changed
    CACHES setting gets a client of its own."""
    if config.get("BACKEND") != _REDIS_CACHE or config.get("KEY_FUNCTION") or config.get("OPTIONS"):
        return None
    location = config.get("LOCATION")
    if not isinstance(location, str) or "," in location:
        return None
    client = _clients.get(location)
    if client is None:
        with _clients_lock:
            client = _clients.get(location)
            if client is None:
                # Short timeouts: a cache outage lets requests through (allow_request) instead of holding them.
                client = redis.Redis.from_url(location, socket_connect_timeout=1, socket_timeout=1)
                _clients[location] = client
    return client


def _increment(key: str, *, timeout: int) -> int:
    """One round trip per request: INCR and EXPIRE NX in one pipeline (the window's first INCR creates
    the key, EXPIRE NX gives it its lifetime once). Without a Redis cache, Django's cache API."""
    config = settings.CACHES.get("default", {})
    client = _redis_counter(config)
    if client is not None:
        full_key = default_key_func(key, config.get("KEY_PREFIX", ""), config.get("VERSION", 1))
        pipe = client.pipeline(transaction=False)
        pipe.incr(full_key)
        pipe.expire(full_key, timeout, nx=True)
        count, _ = pipe.execute()
        return int(count)
    try:
        return int(cache.incr(key))
    except ValueError:
        if cache.add(key, 1, timeout=timeout):
            return 1
        return int(cache.incr(key))
