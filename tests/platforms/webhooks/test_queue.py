"""`LANGBOT_WEBHOOK_QUEUE`: the webhook senders are woken on a queue of their own when it is set, on the
default queue (which `make run`'s single worker consumes) when it is not."""

from __future__ import annotations

from typing import Any

import pytest

from platforms.webhooks import outbox, tasks
from platforms.webhooks.models import WebhookDelivery
from runners.lifecycle.services import run_cancel_request
from tests.factories import WebhookEndpointFactory
from tests.platforms.webhooks.conftest import make_run

pytestmark = pytest.mark.django_db


class _Broker:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []

    def send_task(self, name: str, args: Any = None, queue: str | None = None, **options: Any) -> None:
        self.sent.append((name, queue))


@pytest.mark.parametrize(("setting", "queue"), [("", None), ("webhooks", "webhooks")])
def test_senders_are_woken_on_the_configured_queue(
    settings, monkeypatch, django_capture_on_commit_callbacks, workspace, setting, queue
):
    # given the setting, an endpoint and a broker that records what it is sent
    settings.LANGBOT_WEBHOOK_QUEUE = setting
    broker = _Broker()
    monkeypatch.setattr(outbox, "current_app", broker)
    WebhookEndpointFactory.create(workspace=workspace)
    # when a run end commits, and then the due sweep finds its delivery due for a retry
    with django_capture_on_commit_callbacks(execute=True):
        run_cancel_request(run=make_run(workspace), reason="stop")
    WebhookDelivery.objects.update(attempts=1)
    tasks.webhook_deliveries_due_send()
    # then both wake-ups went to that queue
    assert broker.sent == [(outbox.SEND_TASK, queue), (outbox.SEND_TASK, queue)]
