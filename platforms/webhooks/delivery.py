"""Sending webhook messages: claim due deliveries, sign and POST them concurrently, record each answer.

An attempt is a claim (a conditional UPDATE setting a fresh `claim_token`, counting the attempt and
pushing `next_attempt_at` by `ATTEMPT_LEASE` — so a sender that dies mid-attempt leaves the delivery due
again a minute later, and two senders never attempt it at once), the POSTs, then one write of the
outcomes fenced by the token. A 2xx answer accepts the message; anything else (another status, a
timeout, a refused connection) is retried on the Standard Webhooks schedule — 5 s, 5 min, 30 min, 2 h,
5 h, 10 h after each failure — with a last attempt 24 h after the first; then the delivery has `failed`.
Redirects are not followed (a 3xx is a failure), as the specification asks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from langbot_host.core.crypto import SecretDecryptionError
from platforms.webhooks.models import WebhookDelivery, WebhookEndpoint
from platforms.webhooks.signing import signed_headers

logger = logging.getLogger(__name__)

RETRY_DELAYS = (
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
)
RETRY_WINDOW = timedelta(hours=24)
ATTEMPT_LEASE = timedelta(seconds=60)
REQUEST_TIMEOUT_SECONDS = 15.0
RESPONSE_EXCERPT_CHARS = 1000
CONCURRENT_REQUESTS = 64
DUE_BATCH = 1000
USER_AGENT = "LangBot-Host-Webhooks/1"


def next_attempt_after(*, attempts: int, first_attempt_at: datetime, now: datetime) -> datetime | None:
    """When to try again after `attempts` failed attempts, or None when the delivery has failed for good."""
    deadline = first_attempt_at + RETRY_WINDOW
    if attempts > len(RETRY_DELAYS) + 1 or now >= deadline:
        return None
    if attempts == len(RETRY_DELAYS) + 1:
        return deadline
    return min(now + RETRY_DELAYS[attempts - 1], deadline)


@dataclass
class Answer:
    status_code: int | None
    body: str
    error: str


def endpoint_signing_secrets(endpoint: WebhookEndpoint, *, now: datetime) -> list[str]:
    """The secrets that sign a message to `endpoint` now: its secret, and the previous one in its grace."""
    signing = [str(endpoint.secret)]
    expires = endpoint.previous_secret_expires_at
    if endpoint.previous_secret and expires is not None and expires > now:
        signing.append(str(endpoint.previous_secret))
    return signing


def message_body(delivery: WebhookDelivery) -> str:
    return json.dumps(delivery.payload, ensure_ascii=False, separators=(",", ":"))


def _claim(delivery_ids: list[str], *, now: datetime) -> tuple[uuid.UUID, list[WebhookDelivery]]:
    token = uuid.uuid4()
    keys = []
    for value in delivery_ids:
        try:
            keys.append(uuid.UUID(str(value)))
        except ValueError:
            logger.warning("ignored a malformed webhook delivery id %r", value)
    claimed = WebhookDelivery.objects.filter(
        delivery_id__in=keys,
        status=WebhookDelivery.Status.PENDING,
        next_attempt_at__lte=now,
        endpoint__enabled=True,
    ).update(
        claim_token=token,
        attempts=F("attempts") + 1,
        last_attempt_at=now,
        next_attempt_at=now + ATTEMPT_LEASE,
    )
    if not claimed:
        return token, []
    rows = list(WebhookDelivery.objects.filter(claim_token=token).select_related("endpoint"))
    return token, rows


async def _post(
    client: httpx.AsyncClient, limit: asyncio.Semaphore, url: str, body: str, headers: dict[str, str]
) -> Answer:
    async with limit:
        try:
            response = await client.post(url, content=body.encode(), headers=headers)
        except httpx.HTTPError as exc:
            return Answer(None, "", f"{type(exc).__name__}: {exc}"[:500])
        text = response.text[:RESPONSE_EXCERPT_CHARS].replace("\x00", "")
        return Answer(response.status_code, text, "")


async def _post_all(requests: list[tuple[str, str, dict[str, str]]]) -> list[Answer]:
    limit = asyncio.Semaphore(CONCURRENT_REQUESTS)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_SECONDS)
    limits = httpx.Limits(max_connections=CONCURRENT_REQUESTS, max_keepalive_connections=CONCURRENT_REQUESTS)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False) as client:
        return await asyncio.gather(*(_post(client, limit, url, body, headers) for url, body, headers in requests))


def _outcome(delivery: WebhookDelivery, answer: Answer, *, now: datetime) -> None:
    delivery.last_status_code = answer.status_code
    delivery.last_response = answer.body
    delivery.last_error = answer.error
    delivery.claim_token = None
    if answer.status_code is not None and 200 <= answer.status_code < 300:
        delivery.status = WebhookDelivery.Status.SUCCEEDED
        delivery.delivered_at = now
        delivery.next_attempt_at = None
        return
    first = delivery.created_at
    following = next_attempt_after(attempts=delivery.attempts, first_attempt_at=first, now=now)
    if following is None:
        delivery.status = WebhookDelivery.Status.FAILED
        delivery.next_attempt_at = None
    else:
        delivery.next_attempt_at = following


_OUTCOME_FIELDS = [
    "status", "last_status_code", "last_response", "last_error", "claim_token", "delivered_at", "next_attempt_at",
]  # fmt: skip


def deliveries_attempt(*, delivery_ids: list[str], now: datetime | None = None) -> list[WebhookDelivery]:
    """Attempt the given deliveries that are due (others are left alone: taken, done, not yet due, or
    their endpoint is disabled) and record each answer. Running it twice is harmless. Returns the
    attempted deliveries as recorded."""
    now = now or timezone.now()
    token, deliveries = _claim(delivery_ids, now=now)
    if not deliveries:
        return []
    requests: list[tuple[str, str, dict[str, str]]] = []
    sendable: list[WebhookDelivery] = []
    for delivery in deliveries:
        endpoint = delivery.endpoint
        try:
            signing = endpoint_signing_secrets(endpoint, now=now)
        except SecretDecryptionError:
            _outcome(delivery, Answer(None, "", "the endpoint's secret cannot be decrypted"), now=now)
            continue
        body = message_body(delivery)
        headers = signed_headers(message_id=delivery.event_id, body=body, secrets_=signing)
        headers |= {"content-type": "application/json", "user-agent": USER_AGENT}
        requests.append((endpoint.url, body, headers))
        sendable.append(delivery)
    answers = asyncio.run(_post_all(requests)) if requests else []
    for delivery, answer in zip(sendable, answers, strict=True):
        _outcome(delivery, answer, now=now)
    with transaction.atomic():
        WebhookDelivery.objects.filter(claim_token=token).bulk_update(deliveries, _OUTCOME_FIELDS)
    failed = [d for d in deliveries if d.status != WebhookDelivery.Status.SUCCEEDED]
    if failed:
        logger.info("%d of %d webhook deliveries not accepted", len(failed), len(deliveries))
    return deliveries


def deliveries_due(*, now: datetime | None = None, limit: int = DUE_BATCH) -> list[str]:
    """The ids of pending deliveries whose next attempt is due (oldest first)."""
    now = now or timezone.now()
    rows = WebhookDelivery.objects.filter(
        status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now, endpoint__enabled=True
    ).order_by("next_attempt_at")
    return [str(key) for key in rows.values_list("delivery_id", flat=True)[:limit]]
