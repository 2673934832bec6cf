"""Sending webhook messages: claim due deliveries, sign and POST them, record each answer.

An attempt is a claim (a conditional UPDATE setting a fresh `claim_token`, counting the attempt and
pushing `next_attempt_at` by `ATTEMPT_LEASE` — so a sender that dies mid-attempt leaves the delivery due
again five minutes later, and two senders never attempt it at once), the POSTs, then the outcomes written
under the same token. A 2xx answer accepts the message; anything else (another status, a
timeout, a refused connection) is retried on the Standard Webhooks schedule — 5 s, 5 min, 30 min, 2 h,
5 h, 10 h after each failure — with a last attempt 24 h after the first; then the delivery has `failed`.
Redirects are not followed (a 3xx is a failure), as the specification asks. A message whose host is
refused by the outbound address guard (`foundation.outbound`: a private address, unless the
operator allowed them for the endpoint's workspace or the host) has `failed` at once, with the reason as
its last error: retrying cannot help, a redelivery can once the URL is fixed.

Unlike a chat platform's send (`platforms.delivery`, at most once), a webhook message is sent at least
once on purpose: a timeout after the receiver took it is sent again. Every attempt and redelivery carries
the message's same `webhook-id`, so a receiver that de-duplicates on it, as Standard Webhooks asks, acts
on each message once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from bindings.selectors import workspace_private_addresses_allowed
from foundation.crypto import SecretDecryptionError
from foundation.outbound import AddressRefusedError, excerpt, guarded_transport
from platforms.metrics import WEBHOOK_ATTEMPTS
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
REQUEST_TIMEOUT_SECONDS = 15.0
RESPONSE_EXCERPT_CHARS = 1000
# A batch stops attempting after this long (the rest is given back), and an endpoint that did not answer,
# or answered slower than SLOW_ANSWER_SECONDS, gets no more attempts in that batch: slow receivers cannot
# hold a worker's threads (which also admit runs) for minutes.
BATCH_BUDGET_SECONDS = 30.0
SLOW_ANSWER_SECONDS = 2.0
# Longer than a batch can take (its budget plus one request), so a claimed delivery is never due again
# while its attempt is in flight; after a sender died, the delivery is due again then.
ATTEMPT_LEASE = timedelta(minutes=5)
DUE_BATCH = 1000
FIRST_SEND_GRACE = timedelta(seconds=30)
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
    # No HTTP answer at all (refused, timed out): the endpoint's other messages in the batch wait.
    unreachable: bool = False
    # The address guard refused the host: the delivery fails now instead of being retried.
    refused: bool = False


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
    rows = list(WebhookDelivery.objects.filter(claim_token=token).order_by("id"))
    endpoints = {
        e.pk: e
        for e in WebhookEndpoint.objects.select_related("workspace").filter(pk__in={row.endpoint_id for row in rows})
    }
    for row in rows:
        row.endpoint = endpoints[row.endpoint_id]
    return token, rows


class _Sender(threading.local):
    """Pooled HTTP clients per sending thread, kept between batches (a client costs an SSL context to
    make, and keep-alive connections to a receiver are worth reusing): one that connects to public
    addresses only, one for endpoints whose workspace may reach private ones. A batch is sent one request
    after another: the Celery worker's threads give the concurrency, and a synchronous client spends well
    under half the CPU per request of an asynchronous one juggling several."""

    def __init__(self) -> None:
        self.clients: dict[bool, httpx.Client] = {}

    def post(self, url: str, body: str, headers: dict[str, str], *, allow_private: bool) -> Answer:
        client = self.clients.get(allow_private)
        if client is None:
            # No proxies from the environment: every connection must go through the guarded transport.
            client = self.clients[allow_private] = httpx.Client(
                transport=guarded_transport(allow_private=allow_private),
                timeout=httpx.Timeout(REQUEST_TIMEOUT_SECONDS),
                follow_redirects=False,
                trust_env=False,
            )
        try:
            response = client.post(url, content=body.encode(), headers=headers)
        except AddressRefusedError as exc:
            return Answer(None, "", f"refused: {exc}"[:500], refused=True)
        except httpx.HTTPError as exc:
            return Answer(None, "", f"{type(exc).__name__}: {exc}"[:500], unreachable=True)
        return Answer(response.status_code, excerpt(response.text, RESPONSE_EXCERPT_CHARS), "")


_sender = _Sender()


def _outcome(delivery: WebhookDelivery, answer: Answer, *, now: datetime, answered_at: datetime) -> None:
    delivery.last_status_code = answer.status_code
    delivery.last_response = answer.body
    delivery.last_error = answer.error
    delivery.claim_token = None
    if answer.status_code is not None and 200 <= answer.status_code < 300:
        delivery.status = WebhookDelivery.Status.SUCCEEDED
        delivery.delivered_at = answered_at
        delivery.next_attempt_at = None
        return
    following = (
        None
        if answer.refused
        else next_attempt_after(attempts=delivery.attempts, first_attempt_at=delivery.created_at, now=now)
    )
    if following is None:
        delivery.status = WebhookDelivery.Status.FAILED
        delivery.next_attempt_at = None
    else:
        delivery.next_attempt_at = following


def _release(delivery: WebhookDelivery, *, now: datetime, why: str) -> None:
    """Give a claimed delivery back without attempting it: its attempt is not counted, it is due again
    after the first retry delay."""
    delivery.attempts -= 1
    delivery.last_error = why
    delivery.next_attempt_at = now + RETRY_DELAYS[0]


_OUTCOME_FIELDS = (
    "status", "attempts", "last_status_code", "last_response", "last_error", "delivered_at", "next_attempt_at",
)  # fmt: skip


def _record(token: uuid.UUID, deliveries: list[WebhookDelivery]) -> None:
    """Write the outcomes, fenced by the claim: one UPDATE per distinct outcome (usually one: all 2xx)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for delivery in deliveries:
        groups.setdefault(tuple(getattr(delivery, name) for name in _OUTCOME_FIELDS), []).append(delivery.pk)
    with transaction.atomic():
        for values, pks in groups.items():
            WebhookDelivery.objects.filter(pk__in=pks, claim_token=token).update(
                claim_token=None, **dict(zip(_OUTCOME_FIELDS, values, strict=True))
            )


def _attempts_count(deliveries: list[WebhookDelivery], *, deferred: int) -> None:
    by_status = {
        WebhookDelivery.Status.SUCCEEDED: "accepted",
        WebhookDelivery.Status.FAILED: "failed",
        WebhookDelivery.Status.PENDING: "retrying",
    }
    counts: dict[str, int] = {}
    for delivery in deliveries:
        outcome = by_status.get(WebhookDelivery.Status(delivery.status), "failed")
        counts[outcome] = counts.get(outcome, 0) + 1
    # A deferred delivery is still pending, but was not attempted: not a retry.
    counts["retrying"] = counts.get("retrying", 0) - deferred
    counts["deferred"] = deferred
    for outcome, count in counts.items():
        if count > 0:
            WEBHOOK_ATTEMPTS.labels(outcome).inc(count)


def deliveries_attempt(*, delivery_ids: list[str], now: datetime | None = None) -> list[WebhookDelivery]:
    """Attempt the given deliveries that are due (others are left alone: taken, done, not yet due, or
    their endpoint is disabled) and record each answer. Running it twice is harmless. Returns the
    attempted deliveries as recorded."""
    now = now or timezone.now()
    token, deliveries = _claim(delivery_ids, now=now)
    if not deliveries:
        return []
    requests: list[tuple[str, str, dict[str, str], bool]] = []
    sendable: list[WebhookDelivery] = []
    signing: dict[int, list[str] | None] = {}
    for delivery in deliveries:
        endpoint = delivery.endpoint
        if endpoint.pk not in signing:
            try:
                signing[endpoint.pk] = endpoint_signing_secrets(endpoint, now=now)
            except SecretDecryptionError:
                signing[endpoint.pk] = None
        secrets_ = signing[endpoint.pk]
        if secrets_ is None:
            error = Answer(None, "", "the endpoint's secret cannot be decrypted")
            _outcome(delivery, error, now=now, answered_at=now)
            continue
        body = message_body(delivery)
        headers = signed_headers(message_id=delivery.event_id, body=body, secrets_=secrets_)
        headers |= {"content-type": "application/json", "user-agent": USER_AGENT}
        allow_private = workspace_private_addresses_allowed(workspace=endpoint.workspace)
        requests.append((endpoint.url, body, headers, allow_private))
        sendable.append(delivery)
    started = time.perf_counter()
    stalled: set[int] = set()
    deferred = 0
    answers: list[tuple[WebhookDelivery, Answer]] = []
    for (url, body, headers, allow_private), delivery in zip(requests, sendable, strict=True):
        sent_at = time.perf_counter()
        if delivery.endpoint_id in stalled or sent_at - started > BATCH_BUDGET_SECONDS:
            cause = "the endpoint was slow or did not answer" if delivery.endpoint_id in stalled else "time ran out"
            _release(delivery, now=now, why=f"not attempted: {cause} earlier in its batch")
            deferred += 1
            continue
        answer = _sender.post(url, body, headers, allow_private=allow_private)
        if answer.unreachable or time.perf_counter() - sent_at > SLOW_ANSWER_SECONDS:
            stalled.add(delivery.endpoint_id)
        answers.append((delivery, answer))
    # One time for the whole batch, so that its outcomes are one UPDATE (accepted is accepted).
    answered_at = now + timedelta(seconds=time.perf_counter() - started)
    for delivery, answer in answers:
        _outcome(delivery, answer, now=now, answered_at=answered_at)
    _record(token, deliveries)
    _attempts_count(deliveries, deferred=deferred)
    failed = sum(1 for d in deliveries if d.status != WebhookDelivery.Status.SUCCEEDED)
    if failed:
        logger.info("%d of %d webhook deliveries not accepted", failed, len(deliveries))
    return deliveries


def deliveries_due(*, now: datetime | None = None, limit: int = DUE_BATCH) -> list[str]:
    """The ids of pending deliveries whose next attempt is due (oldest first). A message never attempted
    counts only once `FIRST_SEND_GRACE` has passed: a sender was woken for it when it was recorded, and
    under a backlog that message is merely still queued."""
    now = now or timezone.now()
    rows = WebhookDelivery.objects.filter(
        Q(attempts__gt=0) | Q(next_attempt_at__lte=now - FIRST_SEND_GRACE),
        status=WebhookDelivery.Status.PENDING,
        next_attempt_at__lte=now,
        endpoint__enabled=True,
    ).order_by("next_attempt_at")
    return [str(key) for key in rows.values_list("delivery_id", flat=True)[:limit]]
