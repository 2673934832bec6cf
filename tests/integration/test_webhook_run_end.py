"""Completion webhooks through a real worker: runs end in the worker's ledger write, their messages are
recorded in its transaction and sent by the worker's Celery sender to a local receiver, signed."""

from __future__ import annotations

import time

import pytest
from standardwebhooks.webhooks import Webhook

from platforms.webhooks.outbox import SUBSCRIBED_CACHE_SECONDS
from tests.factories import WebhookEndpointFactory
from tests.fakes.platform_http import serving
from tests.platforms.webhooks.receiver import WebhookReceiver
from tests.processes import post_message, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_for(receiver: WebhookReceiver, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while len(receiver.requests) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_runs_ended_by_the_worker_reach_the_receiver_signed(worker, qa_binding):
    with serving(WebhookReceiver()) as receiver:
        # given an endpoint of the workspace, known to the worker (its cache of subscribed workspaces expired)
        binding = qa_binding()
        endpoint = WebhookEndpointFactory.create(workspace=binding.workspace, url=receiver.url)
        time.sleep(SUBSCRIBED_CACHE_SECONDS + 0.2)
        # when one run completes and another fails
        completed = wait_terminal(post_message(binding, "hello", conversation_id="c1"))
        failed = wait_terminal(post_message(binding, "qa:fail", conversation_id="c2"))
        _wait_for(receiver, 2)
        # then the receiver got one signed message for each, verified by the Standard Webhooks library
        messages = {}
        for request in receiver.requests:
            payload = Webhook(endpoint.secret).verify(request["body"], request["headers"])
            messages[payload["data"]["run_id"]] = payload
        assert len(receiver.requests) == 2
        assert messages[str(completed.run_id)]["type"] == "run.completed"
        assert messages[str(completed.run_id)]["data"]["output"] == "QA_OK:hello"
        assert messages[str(failed.run_id)]["type"] == "run.failed"
        assert messages[str(failed.run_id)]["data"]["error"]["code"] == "runner.error"
