"""Telegram end to end with a real worker and plugin runtime (the qa-runner): an update posted to the webhook
becomes a run whose reply grows on the fake Telegram by paced edits and ends as the run's output; a photo
reaches the runner as an artifact with `ctx.delivery` saying what Telegram supports; a file the runner
creates is uploaded to the chat."""

from __future__ import annotations

import itertools
import json
import time
from decimal import Decimal
from typing import Any

import pytest

from platforms.models import PlatformDelivery
from runners.models import Budget, Run
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.conftest import post_update
from tests.processes import wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
TELEGRAM_INTERVAL = 1.0  # the worker runs with Telegram's own pace


def _run_of(bot: Any, timeout: float = 20) -> Run:
    deadline = time.monotonic() + timeout
    while (run := Run.objects.filter(bot=bot).first()) is None:
        assert time.monotonic() < deadline, "no run was created"
        time.sleep(0.05)
    return wait_terminal(run)


def _delivery(run: Run, timeout: float = 15) -> PlatformDelivery:
    deadline = time.monotonic() + timeout
    while (delivery := PlatformDelivery.objects.filter(run=run).first()) is None:
        assert time.monotonic() < deadline, "the reply was not delivered"
        time.sleep(0.05)
    return delivery


def test_a_message_is_answered_with_a_reply_that_grows_by_paced_edits(
    worker, qa_binding, telegram_bot_for, fake_telegram: FakeTelegram
):
    bot = telegram_bot_for(qa_binding().workspace)

    assert post_update(bot, fake_telegram.message_update("qa:type:1.5 hello", chat_id=4242)).status_code == 200

    run = _run_of(bot)
    assert run.status == Run.Status.COMPLETED
    assert _delivery(run).status == "delivered"
    assert fake_telegram.texts(4242) == [run.output]
    writes = fake_telegram.calls_of("sendMessage", "editMessageText")
    assert writes[0].method == "sendMessage"
    assert writes[0].params["text"] != run.output  # the first write showed the reply still growing
    assert [w.method for w in writes[1:]] == ["editMessageText"] * (len(writes) - 1)
    assert all(b.at - a.at >= TELEGRAM_INTERVAL * 0.95 for a, b in itertools.pairwise(writes))


def test_a_photo_reaches_the_runner_as_an_artifact_and_ctx_delivery_is_telegrams(
    worker, qa_binding, telegram_bot_for, fake_telegram: FakeTelegram
):
    bot = telegram_bot_for(qa_binding().workspace)
    fake_telegram.add_file("PHOTO-E2E", b"\xff\xd8\xff\xe0 a small jpeg", "photos/file_9.jpg")

    update = fake_telegram.message_update("qa:echo_context what is it?", photo_file_id="PHOTO-E2E", chat_id=5151)
    assert post_update(bot, update).status_code == 200

    run = _run_of(bot)
    assert run.status == Run.Status.COMPLETED
    context = json.loads(run.output)
    (attachment,) = context["input"]["attachments"]
    assert attachment["name"] == "photo-b1.jpg"
    assert attachment["size"] == len(b"\xff\xd8\xff\xe0 a small jpeg")
    delivery = context["delivery"]
    assert delivery["surface"] == "telegram"
    assert (delivery["supports_streaming"], delivery["supports_edit"], delivery["supports_reaction"]) == (
        True,
        True,
        True,
    )
    assert delivery["max_message_size"] == 4096
    assert _delivery(run).status == "delivered"
    assert fake_telegram.texts(5151) == [run.output]


def test_a_file_the_runner_creates_is_sent_to_the_chat(
    worker, qa_binding, telegram_bot_for, fake_telegram: FakeTelegram
):
    bot = telegram_bot_for(qa_binding().workspace)

    assert post_update(bot, fake_telegram.message_update("qa:artifact quarterly", chat_id=6161)).status_code == 200

    run = _run_of(bot)
    delivery = _delivery(run)
    assert delivery.status == "delivered"
    document = next(m for m in fake_telegram.sent if m.kind == "document")
    assert (document.chat_id, document.file_name, document.file_bytes) == (
        "6161",
        "qa-artifact.txt",
        b"QA_ARTIFACT:quarterly",
    )
    assert fake_telegram.texts(6161) == [run.output]


def test_a_user_past_the_budget_is_told_so_in_the_chat(
    worker, qa_binding, telegram_bot_for, fake_telegram: FakeTelegram
):
    # given a daily workspace budget that is already used up (nothing may be spent)
    workspace = qa_binding().workspace
    bot = telegram_bot_for(workspace)
    Budget.objects.create(workspace=workspace, amount=Decimal("0"), period=Budget.Period.DAY, name="none today")

    assert post_update(bot, fake_telegram.message_update("qa:ok hello", chat_id=7171)).status_code == 200

    # then the run does not start, and the chat's user reads why and when it resets
    run = _run_of(bot)
    assert (run.status, (run.error or {}).get("code")) == (Run.Status.FAILED, "quota_exceeded")
    assert _delivery(run).status == "delivered"
    (text,) = fake_telegram.texts(7171)
    assert "daily model budget of this workspace is used up" in text
    assert "resets at" in text
