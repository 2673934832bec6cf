"""Fixtures of the completion webhook tests: a local receiver, runs to end, and the sender driven by hand
with the clock where a test puts it (no broker, no sleeping)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest

from platforms.webhooks.delivery import deliveries_attempt
from platforms.webhooks.models import WebhookDelivery
from platforms.webhooks.outbox import subscribed_workspaces_forget
from runners.models import Run
from tests.factories import AgentBindingFactory
from tests.fakes.platform_http import serving
from tests.platforms.webhooks.receiver import WebhookReceiver
from transcripts.models import EventLog


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with serving(WebhookReceiver()) as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_subscriptions() -> Iterator[None]:
    # Each test makes its own endpoints; the per-process cache must not hide them.
    subscribed_workspaces_forget()
    yield
    subscribed_workspaces_forget()


def make_run(workspace, *, binding=None, status: str = Run.Status.QUEUED, conversation_id: str = "conv-1") -> Run:
    binding = binding or AgentBindingFactory.create(workspace=workspace, concurrency_policy="parallel")
    event = EventLog.objects.create(
        workspace=workspace,
        event_id=f"evt-{uuid.uuid4().hex[:10]}",
        event_type="message.received",
        source="api",
        conversation_id=conversation_id,
        input={"text": "hi"},
    )
    return Run.objects.create(
        workspace=workspace,
        event=event,
        binding=binding,
        binding_key=binding.binding_id,
        runner_id=binding.runner_id,
        conversation_id=conversation_id,
        status=status,
    )


def send_due(endpoint, *, now: datetime | None = None) -> list[WebhookDelivery]:
    """What the Celery sender does for every delivery of `endpoint`, at `now`."""
    ids = [str(key) for key in WebhookDelivery.objects.filter(endpoint=endpoint).values_list("delivery_id", flat=True)]
    return deliveries_attempt(delivery_ids=ids, now=now)
