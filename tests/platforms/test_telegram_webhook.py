"""Telegram updates in: the webhook checks the secret token, turns a message into one event (and run) however
often Telegram delivers it, answers in groups only when it is meant, and stores photos and documents as the
run's input artifacts."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from artifacts.models import Artifact
from bindings.models import Bot
from platforms.inbound import platform_update_accept
from platforms.interface import InboundUpdate
from platforms.models import InboundRefusal
from platforms.tasks import platform_update_ingest
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory
from tests.platforms.conftest import post_update, webhook_url
from transcripts.models import EventLog

pytestmark = pytest.mark.django_db


@pytest.fixture
def bot(workspace, telegram_bot_for):
    AgentBindingFactory.create(workspace=workspace)
    return telegram_bot_for(workspace)


def test_a_forged_or_missing_secret_token_is_refused_and_recorded(bot, fake_telegram):
    update = fake_telegram.message_update("hello")

    forged = post_update(bot, update, secret="guessed")
    missing = post_update(bot, update, secret=None)

    assert forged.status_code == 401
    assert missing.status_code == 401
    assert forged.json()["error"]["code"] == "unauthorized"
    assert not EventLog.objects.exists()
    refusals = list(InboundRefusal.objects.filter(bot=bot).values_list("reason", "count"))
    assert refusals == [("forged", 2)]  # one source, one window: one counted row


def test_a_message_becomes_one_event_and_run_with_its_chat_as_the_reply_target(bot, fake_telegram):
    update = fake_telegram.message_update("hello there", chat_id=4242, user_id=31337)

    answer = post_update(bot, update)

    assert answer.status_code == 200
    assert answer.json() == {"ok": True}
    event = EventLog.objects.get()
    assert event.source == "platform"
    assert event.bot_id == bot.pk
    assert event.input["text"] == "hello there"
    assert event.conversation_id == f"bot:{bot.bot_id}:4242"
    assert event.actor is not None
    assert event.actor["actor_id"] == "31337"
    assert event.data["reply_target"] == {"chat_id": "4242"}
    assert Run.objects.filter(event=event).count() == 1


def test_a_redelivered_update_is_handled_once(bot, fake_telegram):
    update = fake_telegram.message_update("only once")

    first = post_update(bot, update)
    again = post_update(bot, update)

    assert first.status_code == again.status_code == 200
    assert EventLog.objects.count() == 1
    assert Run.objects.count() == 1


def test_in_a_group_the_bot_answers_commands_mentions_and_replies_to_it_only(bot, fake_telegram):
    group = {"chat_id": -100500, "chat_type": "supergroup"}
    chatter = fake_telegram.message_update("just people talking", **group)
    command = fake_telegram.message_update(
        "/ask@langbot_test_bot what time is it",
        entities=[{"type": "bot_command", "offset": 0, "length": 21}],
        **group,
    )
    other_bots = fake_telegram.message_update(
        "/ask@some_other_bot hi", entities=[{"type": "bot_command", "offset": 0, "length": 19}], **group
    )
    mention = fake_telegram.message_update(
        "@langbot_test_bot summarise this", entities=[{"type": "mention", "offset": 0, "length": 17}], **group
    )
    reply = fake_telegram.message_update("and then?", reply_to_bot=True, **group)

    for update in (chatter, command, other_bots, mention, reply):
        assert post_update(bot, update).status_code == 200

    events = list(EventLog.objects.order_by("id"))
    assert [e.input["text"] for e in events] == [
        "/ask@langbot_test_bot what time is it",
        "summarise this",
        "and then?",
    ]
    assert events[0].data["command"] == "ask"
    # In a group the answer replies to the message that asked.
    assert events[1].data["reply_target"]["reply_to_message_id"] == str(mention["message"]["message_id"])


def test_an_unknown_bot_or_a_platform_mismatch_answers_404(workspace, bot, fake_telegram):
    webui_bot = BotFactory.create(workspace=workspace, platform="webui")
    update = fake_telegram.message_update("hi")

    wrong_platform = post_update(webui_bot, update)
    unknown = post_update(BotFactory.build(workspace=workspace, bot_id="nobody"), update)

    assert wrong_platform.status_code == 404
    assert unknown.status_code == 404
    assert not EventLog.objects.exists()


def test_a_body_that_is_not_an_update_answers_400(bot, client):
    answer = client.post(
        webhook_url(bot), data="not json", content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": "webhook-secret-1"},
    )  # fmt: skip

    assert answer.status_code == 400
    assert not EventLog.objects.exists()


def test_a_photo_and_a_document_are_fetched_after_the_answer_and_become_input_artifacts(
    bot, fake_telegram, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    fake_telegram.add_file("PHOTO-1", b"\xff\xd8\xff\xe0 a jpeg", "photos/file_1.jpg")
    fake_telegram.add_file("DOC-1", b"%PDF-1.4 a report", "documents/file_2.pdf")
    photo = fake_telegram.message_update("what is this?", photo_file_id="PHOTO-1")
    document = fake_telegram.message_update(
        None,
        document={
            "file_id": "DOC-1",
            "file_unique_id": "d1",
            "file_name": "report.pdf",
            "mime_type": "application/pdf",
        },
    )

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert post_update(bot, photo).status_code == 200
        assert post_update(bot, document).status_code == 200
        # Nothing is downloaded while Telegram waits for the webhook's answer.
        assert not fake_telegram.calls_of("getFile")
    assert callbacks

    photo_event, document_event = EventLog.objects.order_by("id")
    assert photo_event.input["text"] == "what is this?"
    (photo_ref,) = photo_event.input["attachments"]
    assert Artifact.objects.get(artifact_id=photo_ref["artifact_id"]).name == "photo-b1.jpg"
    assert photo_ref["mime_type"] == "image/jpeg"
    (document_ref,) = document_event.input["attachments"]
    assert document_ref["name"] == "report.pdf"
    assert document_ref["size"] == len(b"%PDF-1.4 a report")
    assert photo_event.data["platform_files"] == [{"file_id": "PHOTO-1", "file_unique_id": "b1"}]
    assert Run.objects.count() == 2


def test_a_redelivered_photo_is_not_fetched_again(bot, fake_telegram, monkeypatch, django_capture_on_commit_callbacks):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    fake_telegram.add_file("PHOTO-2", b"\xff\xd8\xff\xe0 jpeg", "photos/file_3.jpg")
    update = fake_telegram.message_update(None, photo_file_id="PHOTO-2")

    with django_capture_on_commit_callbacks(execute=True):
        post_update(bot, update)
    with django_capture_on_commit_callbacks(execute=True):
        post_update(bot, update)

    assert len(fake_telegram.calls_of("getFile")) == 1
    assert EventLog.objects.count() == 1
    assert Artifact.objects.count() == 1


def test_a_file_above_the_fetch_limit_is_not_downloaded_and_the_text_still_arrives(
    bot, fake_telegram, monkeypatch, settings, django_capture_on_commit_callbacks
):
    settings.LANGBOT_ARTIFACT_FETCH_MAX_BYTES = 1024  # the photo says it is 2048 bytes
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    fake_telegram.add_file("PHOTO-BIG", b"\xff" * 2048, "photos/big.jpg")

    with django_capture_on_commit_callbacks(execute=True):
        post_update(bot, fake_telegram.message_update("look", photo_file_id="PHOTO-BIG"))

    event = EventLog.objects.get()
    assert event.input["text"] == "look"
    assert event.input["attachments"] == []
    assert event.data["platform_files"] == [{"file_id": "PHOTO-BIG", "file_unique_id": "b1"}]
    assert not fake_telegram.calls_of("getFile")


def test_a_bot_created_over_rest_answers_on_its_webhook_and_its_secrets_are_not_echoed(
    workspace, api_client, fake_telegram
):
    AgentBindingFactory.create(workspace=workspace)
    created = api_client.post(
        "/api/v1/bots",
        {
            "bot_id": "tg-support",
            "platform": "telegram",
            "name": "Support",
            "credentials": {
                "token": "777000111:AAtest-token",
                "secret_token": "s3cret",
                "api_base_url": fake_telegram.origin,
            },
        },
        format="json",
    )
    assert created.status_code == 201
    assert "s3cret" not in created.content.decode()
    bot = Bot.objects.get(bot_id="tg-support")

    answer = post_update(bot, fake_telegram.message_update("hi from REST"), secret="s3cret")

    assert answer.status_code == 200
    assert EventLog.objects.get().input["text"] == "hi from REST"


def test_a_webhook_update_reads_its_bot_once(bot, fake_telegram):
    update = fake_telegram.message_update("hello")

    with CaptureQueriesContext(connection) as queries:
        answer = post_update(bot, update)

    assert answer.status_code == 200
    bot_table = connection.ops.quote_name(Bot._meta.db_table)
    bot_reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT") and f"FROM {bot_table}" in q["sql"]]
    assert len(bot_reads) == 1, bot_reads  # the webhook's own lookup; the gateway does not repeat it
    assert Run.objects.filter(event__bot=bot).count() == 1


def test_a_connection_holding_a_bot_disabled_since_makes_no_event(bot, fake_telegram):
    held = Bot.objects.select_related("workspace").get(pk=bot.pk)  # as a long-lived connection keeps it
    Bot.objects.filter(pk=bot.pk).update(enabled=False)

    update = InboundUpdate(envelope={"event_id": "tg-held-1", "input": {"text": "hello"}})

    result = platform_update_accept(bot=held, update=update)

    assert result is None
    assert not EventLog.objects.exists()
