"""Prometheus metrics of what the host delivers outside itself: replies to chat platforms and completion
webhooks. Defined here (the host's own run metrics are in `runners.metrics`), observed where the outcome is
decided, served with the others at `/metrics` through the shared multiprocess directory."""

from __future__ import annotations

from prometheus_client import Counter

PLATFORM_DELIVERIES = Counter(
    "langbot_platform_deliveries",
    "Runs' replies delivered to chat platforms, by platform and outcome (`delivered`, or `failed` after the "
    "host's retries: the failure is recorded on the run).",
    ["platform", "outcome"],
)
WEBHOOK_ATTEMPTS = Counter(
    "langbot_webhook_attempts",
    "Completion webhook delivery attempts, by outcome: `accepted` (2xx), `retrying` (a retry is scheduled), "
    "`failed` (no retry left, or the address was refused), `deferred` (given back unattempted, its batch "
    "ran out of time or its endpoint was slow).",
    ["outcome"],
)
