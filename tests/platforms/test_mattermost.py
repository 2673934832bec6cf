"""Mattermost bots end to end on a fake Mattermost server: an outgoing webhook's token checked (wrong and
missing refused and recorded, the token never stored with the event), form and JSON webhooks becoming one
event per post however often sent, the bot's own posts ignored, whether a post addresses the bot (trigger
word or @-mention), files fetched into input artifacts, a streamed reply written as one post edited as it
grows and ending with the final text, a 429 waited out, files out uploaded and posted, reactions, "Set the
platform webhook" learning the bot's id and @name, the credential schema checked on save, and no body
making the webhook answer 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from artifacts.models import Artifact
from bindings.models import AgentBinding, Bot
from platforms.adapters.mattermost import MattermostAdapter
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import OutboundFile, ReplyTarget, SentMessage
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.services import bot_webhook_register
from platforms.tasks import platform_update_ingest
from runners.actions.delivery import surface_delivery
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.mattermost_server import (
    BOT_TOKEN,
    BOT_USER_ID,
    BOT_USERNAME,
    CHANNEL_ID,
    WEBHOOK_TOKEN,
    FakeMattermost,
)
from tests.fakes.platform_http import serving
from tests.fuzzing import fuzz_settings
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _deliver,
    _delta,
    fast_pace,
)
from transcripts.models import EventLog


@pytest.fixture
def fake_mm() -> Iterator[FakeMattermost]:
    with serving(FakeMattermost()) as fake:
        yield fake


@pytest.fixture
def mm_bot_for(fake_mm: FakeMattermost) -> Callable[..., Bot]:
    def make(workspace: Any, **extra: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="mattermost",
            credentials={
                "server_url": fake_mm.origin,
                "bot_token": BOT_TOKEN,
                "webhook_token": WEBHOOK_TOKEN,
                **extra,
            },
        )

    return make


@pytest.fixture
def bot(workspace: Any, mm_bot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace)
    return mm_bot_for(workspace, bot_user_id=BOT_USER_ID, bot_username=BOT_USERNAME)


def post_webhook(bot: Bot, body: bytes, content_type: str) -> Any:
    url = f"/platforms/mattermost/{bot.workspace.slug}/{bot.bot_id}/webhook"
    return Client().post(url, data=body, content_type=content_type)


@pytest.mark.django_db
@pytest.mark.parametrize("as_json", [False, True], ids=["form", "json"])
def test_a_post_becomes_one_event_however_often_sent_and_the_token_is_not_stored(bot, as_json):
    body, content_type = FakeMattermost.outgoing("langbot summarise", trigger_word="langbot", as_json=as_json)

    assert post_webhook(bot, body, content_type).status_code == 200
    assert post_webhook(bot, body, content_type).status_code == 200

    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "langbot summarise"
    assert event.conversation_id == f"bot:{bot.bot_id}:{CHANNEL_ID}"
    assert (event.data["chat_type"], event.data["mentioned"]) == ("group", True)
    assert WEBHOOK_TOKEN not in json.dumps(event.data)
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_whether_a_post_addresses_the_bot_and_the_bots_own_posts_ignored(bot):
    # A message that does not address the bot is recorded only when a binding answers it (group_always).
    AgentBinding.objects.filter(workspace=bot.workspace).update(trigger_policy={"group_always": True})
    for text, user_id in (
        ("hey @langbot what now", "user0000000000000000000ada"),
        ("just chatting", "user0000000000000000000ada"),
        ("my own reply", BOT_USER_ID),
    ):
        body, content_type = FakeMattermost.outgoing(text, user_id=user_id)
        assert post_webhook(bot, body, content_type).status_code == 200

    seen = {(e.input or {}).get("text"): e.data["mentioned"] for e in EventLog.objects.all()}
    assert seen == {"hey @langbot what now": True, "just chatting": False}


@pytest.mark.django_db
def test_a_wrong_or_missing_token_is_refused_and_recorded(bot):
    wrong = post_webhook(bot, *FakeMattermost.outgoing("hi", token="guessed"))
    missing = post_webhook(bot, *FakeMattermost.outgoing("hi", token=""))

    assert (wrong.status_code, missing.status_code) == (403, 401)
    assert not EventLog.objects.exists()
    assert sum(InboundRefusal.objects.values_list("count", flat=True)) == 2


@pytest.mark.django_db
def test_a_file_is_fetched_and_becomes_an_input_artifact(bot, fake_mm, monkeypatch, django_capture_on_commit_callbacks):
    # A message that does not address the bot is recorded only when a binding answers it (group_always).
    AgentBinding.objects.filter(workspace=bot.workspace).update(trigger_policy={"group_always": True})
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    file_id = fake_mm.add_file("notes.pdf", "application/pdf", b"%PDF-1.7\n")

    with django_capture_on_commit_callbacks(execute=True):
        assert post_webhook(bot, *FakeMattermost.outgoing("read this", file_ids=[file_id])).status_code == 200

    (ref,) = (EventLog.objects.get().input or {})["attachments"]
    stored = Artifact.objects.get(artifact_id=ref["artifact_id"])
    assert (stored.name, stored.mime_type, stored.size) == ("notes.pdf", "application/pdf", 9)


def test_ctx_delivery_says_what_mattermost_supports():
    mm = surface_delivery("mattermost")
    assert (mm.supports_edit, mm.supports_reaction, mm.max_message_size) == (True, True, 16383)


@pytest.mark.django_db
def test_set_the_platform_webhook_learns_the_bots_id_and_name(workspace, mm_bot_for):
    bot = mm_bot_for(workspace)

    note = bot_webhook_register(bot=bot, url="https://host.example/platforms/mattermost/w/b/webhook")

    bot.refresh_from_db()
    assert (bot.credentials["bot_user_id"], bot.credentials["bot_username"]) == (BOT_USER_ID, BOT_USERNAME)
    assert "https://host.example/platforms/mattermost/w/b/webhook" in note


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
webhook_shapes = st.fixed_dictionaries(
    {"token": st.just(WEBHOOK_TOKEN)},
    optional={
        "post_id": json_values | st.just("p" * 26),
        "channel_id": json_values | st.just(CHANNEL_ID),
        "text": json_values,
        "user_id": json_values,
        "file_ids": json_values,
        "timestamp": json_values,
        "trigger_word": json_values,
    },
)


@pytest.mark.django_db
def test_no_body_makes_the_webhook_answer_500(bot, caplog):
    @fuzz_settings(max_examples=80)
    @given(
        body=json_values | webhook_shapes,
        as_json=st.booleans(),
        raw=st.none() | st.binary(max_size=64),
    )
    def never_a_server_error(body: Any, as_json: bool, raw: bytes | None) -> None:
        caplog.clear()
        if raw is not None:
            data, content_type = raw, "application/x-www-form-urlencoded"
        elif as_json:
            data, content_type = json.dumps(body).encode(), "application/json"
        else:
            fields = body if isinstance(body, dict) else {"token": WEBHOOK_TOKEN, "x": body}
            data = "&".join(f"{k}={json.dumps(v)}" for k, v in fields.items()).encode()
            content_type = "application/x-www-form-urlencoded"
        answer = post_webhook(bot, data, content_type)
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


@pytest.mark.django_db
def test_the_credential_schema_is_checked_on_save_over_rest(api_client):
    missing = api_client.post(
        "/api/v1/bots",
        {"bot_id": "mm", "platform": "mattermost", "credentials": {"server_url": "https://chat.example.com"}},
        format="json",
    )

    assert missing.status_code == 400
    assert set(missing.json()["error"]["details"]["fields"]) == {"credentials.bot_token", "credentials.webhook_token"}


# -- replies ----------------------------------------------------------------------------------------


@sync_to_async
def _platform_run(fake: FakeMattermost, mm_bot_for: Callable[..., Bot]) -> Run:
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    bot = mm_bot_for(workspace)
    assert post_webhook(bot, *FakeMattermost.outgoing("langbot hi", trigger_word="langbot")).status_code == 200
    return Run.objects.get(bot=bot)


@pytest.mark.django_db(transaction=True)
async def test_a_streamed_reply_is_one_post_edited_as_it_grows_ending_with_the_final_text(fake_mm, mm_bot_for):
    run = await _platform_run(fake_mm, mm_bot_for)
    fake_mm.limit_next(1)  # the first write is rate limited: waited out, not lost

    await _deliver(
        PlatformDeliveryPort(),
        run,
        ([_delta("Hello")], 0),
        ([_delta(", world")], 0.3),
        ([_delta(" and more")], 0.3),
        ([_completed("Hello, world and more.")], 0.3),
    )

    (post,) = fake_mm.channel_posts()
    assert post.message == "Hello, world and more."
    assert post.edits >= 1
    assert ("post", 429) in fake_mm.calls
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db
def test_files_go_out_as_an_upload_and_a_post_naming_it_and_reactions_are_the_bots(fake_mm):
    adapter = MattermostAdapter(
        bot_id="b", credentials={"server_url": fake_mm.origin, "bot_token": BOT_TOKEN}, allow_private=True
    )

    async def act() -> SentMessage:
        try:
            sent = await adapter.send_file(
                ReplyTarget(chat_id=CHANNEL_ID), OutboundFile(b"a,b\n", "table.csv", "text/csv", caption="the table")
            )
            await adapter.add_reaction(sent, ":white_check_mark:")
            return sent
        finally:
            await adapter.aclose()

    sent = async_to_sync(act)()

    (post,) = fake_mm.channel_posts()
    assert (post.id, post.message) == (sent.message_id, "the table")
    (file_id,) = post.file_ids
    assert fake_mm.uploads[file_id] == ("table.csv", "text/csv", b"a,b\n")
    assert fake_mm.reactions == [(BOT_USER_ID, post.id, "white_check_mark")]
