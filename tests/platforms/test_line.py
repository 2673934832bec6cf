"""LINE Messaging API bots end to end on a fake API: `X-Line-Signature` checked (forged and unsigned
bodies refused), the console's empty verification answered, text and file messages becoming events once
however often LINE redelivers them, follow/join and other events acknowledged, a group message saying
whether it mentions the bot, files fetched from the content endpoint, replies by the event's reply token
once and by push after it (and when it is stale), text split at LINE's 5,000 characters, the credential
schema checked on save, and no body making the webhook answer 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from artifacts.models import Artifact
from bindings.models import AgentBinding, Bot
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.line_server import ACCESS_TOKEN, CHANNEL_SECRET, FakeLine, signature
from tests.fakes.platform_http import serving
from tests.fuzzing import fuzz_settings
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    fast_pace,
)
from transcripts.models import EventLog


@pytest.fixture
def fake_line() -> Iterator[FakeLine]:
    with serving(FakeLine()) as fake:
        yield fake


@pytest.fixture
def line_bot_for(fake_line: FakeLine) -> Callable[..., Bot]:
    def make(workspace: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="line",
            credentials={
                "channel_secret": CHANNEL_SECRET,
                "channel_access_token": ACCESS_TOKEN,
                "api_base_url": fake_line.origin,
            },
        )

    return make


@pytest.fixture
def bot(workspace: Any, line_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return line_bot_for(workspace)


def webhook_url(bot: Bot) -> str:
    return f"/platforms/line/{bot.workspace.slug}/{bot.bot_id}/webhook"


def post_webhook(bot: Bot, body: bytes, *, signed: str | None = None) -> Any:
    headers = {"X-Line-Signature": signed if signed is not None else signature(body)}
    return Client().post(webhook_url(bot), data=body, content_type="application/json", headers=headers)


@pytest.mark.django_db
def test_the_consoles_verification_starts_nothing_and_follow_and_join_are_events_of_their_own(bot, fake_line):
    follow = {"type": "follow", "timestamp": 1, "source": {"type": "user", "userId": "Uada"}, "replyToken": "x",
              "webhookEventId": "01F", "mode": "active"}  # fmt: skip
    join = {**follow, "type": "join", "webhookEventId": "01J", "source": {"type": "group", "groupId": "Cg"}}
    leave = {**join, "type": "leave", "webhookEventId": "01L"}

    assert post_webhook(bot, FakeLine.webhook()).status_code == 200
    assert not EventLog.objects.exists()
    assert post_webhook(bot, FakeLine.webhook(follow, join, leave)).status_code == 200
    assert post_webhook(bot, FakeLine.webhook(follow, join, leave)).status_code == 200  # redelivered: once

    events = {e.event_type: e for e in EventLog.objects.all()}
    assert sorted(events) == ["bot.added", "member.joined"]
    assert (events["member.joined"].actor or {})["actor_id"] == "Uada"
    assert events["bot.added"].data["chat_id"] == "Cg"
    assert events["bot.added"].data["reply_target"]["extra"]["reply_token"] == "x"


@pytest.mark.django_db
def test_a_text_message_becomes_one_event_however_often_it_is_delivered(bot, fake_line):
    body = FakeLine.webhook(fake_line.message_event({"type": "text", "text": "hello there"}, user="Uada"))

    assert post_webhook(bot, body).status_code == 200
    assert post_webhook(bot, body).status_code == 200

    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "hello there"
    assert event.conversation_id == f"bot:{bot.bot_id}:Uada"
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_a_group_message_says_whether_it_mentions_the_bot(bot, fake_line):
    # A message that does not address the bot is recorded only when a binding answers it (group_always).
    AgentBinding.objects.filter(workspace=bot.workspace).update(trigger_policy={"group_always": True})
    mention = {"mentionees": [{"index": 0, "length": 4, "type": "user", "userId": "Ubot", "isSelf": True}]}
    to_bot = fake_line.message_event({"type": "text", "text": "@bot hi", "mention": mention}, group="Cgroup")
    chatter = fake_line.message_event({"type": "text", "text": "just chatting"}, group="Cgroup")

    assert post_webhook(bot, FakeLine.webhook(to_bot, chatter)).status_code == 200

    seen = {(e.input or {}).get("text"): (e.data["chat_type"], e.data["mentioned"]) for e in EventLog.objects.all()}
    assert seen == {"@bot hi": ("group", True), "just chatting": ("group", False)}
    assert {e.conversation_id for e in EventLog.objects.all()} == {f"bot:{bot.bot_id}:Cgroup"}


@pytest.mark.django_db
def test_forged_and_unsigned_bodies_are_refused(bot, fake_line):
    body = FakeLine.webhook(fake_line.message_event({"type": "text", "text": "hi"}))

    forged = post_webhook(bot, body, signed=signature(body, "guessed-secret"))
    unsigned = post_webhook(bot, body, signed="")
    tampered = post_webhook(bot, body.replace(b'"hi"', b'"ha"'), signed=signature(body))

    assert [forged.status_code, unsigned.status_code, tampered.status_code] == [401, 401, 401]
    assert not EventLog.objects.exists()
    assert sum(InboundRefusal.objects.values_list("count", flat=True)) == 3


@pytest.mark.django_db
def test_a_file_is_fetched_from_the_content_endpoint_and_becomes_an_input_artifact(
    bot, fake_line, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    event = fake_line.message_event({"type": "file", "fileName": "notes.pdf", "fileSize": 9})
    fake_line.add_content(event["message"]["id"], "application/pdf", b"%PDF-1.7\n")

    with django_capture_on_commit_callbacks(execute=True):
        assert post_webhook(bot, FakeLine.webhook(event)).status_code == 200

    (ref,) = (EventLog.objects.get().input or {})["attachments"]
    stored = Artifact.objects.get(artifact_id=ref["artifact_id"])
    assert (stored.name, stored.mime_type, stored.size) == ("notes.pdf", "application/pdf", 9)


def test_ctx_delivery_says_what_line_supports():
    line = surface_delivery("line")
    assert (line.supports_edit, line.supports_reaction, line.max_message_size) == (False, False, 5000)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
event_shapes = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "follow", 3]), "message": json_values, "source": json_values},
    optional={"timestamp": json_values, "replyToken": json_values, "webhookEventId": json_values, "mode": json_values},
)


@pytest.mark.django_db
def test_no_signed_body_makes_the_webhook_answer_500(bot, caplog):
    @fuzz_settings(max_examples=80)
    @given(body=json_values | st.fixed_dictionaries({"events": st.lists(event_shapes, max_size=2) | json_values}))
    def never_a_server_error(body: Any) -> None:
        caplog.clear()
        raw = json.dumps(body).encode()
        answer = post_webhook(bot, raw)
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    missing = api_client.post(
        "/api/v1/bots", {"bot_id": "ln", "platform": "line", "credentials": {"channel_secret": "s"}}, format="json"
    )

    assert missing.status_code == 400
    assert set(missing.json()["error"]["details"]["fields"]) == {"credentials.channel_access_token"}


# -- replies ----------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeLine, line_bot_for: Callable[..., Bot], *, age_seconds: float = 0.0) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = line_bot_for(workspace)
    event = fake.message_event({"type": "text", "text": "hi"}, user="Uada", age_seconds=age_seconds)
    assert post_webhook(bot, FakeLine.webhook(event)).status_code == 200
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_long_reply_goes_by_reply_token_once_then_by_push_split_at_5000(fake_line, line_bot_for):
    run = await _platform_run(fake_line, line_bot_for)
    reply = "A sentence of the long answer. " * 400  # 12,400 characters

    await _deliver(PlatformDeliveryPort(), run, ([_completed(reply)], 0))

    sent = fake_line.texts("Uada")
    assert [how for how, _ in sent] == ["reply", "push", "push"]
    assert all(len(text) <= 5000 for _, text in sent)
    assert " ".join(text for _, text in sent) == reply.strip()
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_reply_after_the_tokens_short_life_is_pushed(fake_line, line_bot_for):
    run = await _platform_run(fake_line, line_bot_for, age_seconds=120)

    await _deliver(PlatformDeliveryPort(), run, ([_completed("late but here")], 0))

    assert fake_line.texts("Uada") == [("push", "late but here")]
    assert not [c for c in fake_line.calls if c[0] == "reply"]
