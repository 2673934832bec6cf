"""WeCom AI bots end to end on a fake of WeCom's side: the URL check, sealed and signed JSON callbacks (a
forged or stale one refused), a message answered at once with a sealed stream message, the run's deltas
being what the next stream poll returns and the last poll saying `finish`, a redelivered message one event
on one stream, a message no binding answers finished at once, a reply longer than one stream message
sending its rest through the response URL, a sealed picture in, a card click as `card.clicked`, and no body
making the webhook answer 500."""

from __future__ import annotations

import asyncio
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
from bindings.models import Bot
from platforms.delivery import PlatformDeliveryPort
from platforms.models import InboundRefusal, PlatformDelivery
from platforms.tasks import platform_update_ingest
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.platform_http import serving
from tests.fakes.wecom_aibot import AIBOT_ID, FakeWeComAIBot
from tests.fakes.wecom_server import ENCODING_AES_KEY, TOKEN
from tests.fuzzing import fuzz_settings
from tests.platforms.test_delivery_policy import (  # noqa: F401 (autouse fixtures)
    _close_thread_connections,
    _completed,
    _delta,
    fast_pace,
)
from transcripts.models import EventLog


@pytest.fixture
def fake_aibot() -> Iterator[FakeWeComAIBot]:
    with serving(FakeWeComAIBot()) as fake:
        yield fake


@pytest.fixture
def aibot_for(fake_aibot: FakeWeComAIBot) -> Callable[..., Bot]:
    def make(workspace: Any, **credentials: Any) -> Bot:
        return BotFactory.create(
            workspace=workspace,
            platform="wecom_aibot",
            credentials={
                "token": TOKEN,
                "encoding_aes_key": ENCODING_AES_KEY,
                "bot_id": AIBOT_ID,
                "api_base_url": fake_aibot.origin,
                **credentials,
            },
        )

    return make


def webhook_url(bot: Bot) -> str:
    return f"/platforms/wecom_aibot/{bot.workspace.slug}/{bot.bot_id}/webhook"


def post(bot: Bot, plain: dict[str, Any], **sign: Any) -> Any:
    body, query = FakeWeComAIBot.callback(plain, **sign)
    return Client().post(f"{webhook_url(bot)}?{query}", data=body, content_type="application/json")


def poll(bot: Bot, stream_id: str) -> dict[str, Any]:
    answer = post(bot, FakeWeComAIBot.poll(stream_id))
    assert answer.status_code == 200, answer.content
    return FakeWeComAIBot.opened(answer.content)["stream"]


@pytest.fixture
def bot(workspace: Any, aibot_for: Callable[..., Bot]) -> Bot:
    AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
    return aibot_for(workspace)


# -- inbound ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_url_check_answers_the_decrypted_echo_and_forged_or_stale_callbacks_are_refused(bot, fake_aibot):
    check = Client().get(f"{webhook_url(bot)}?{FakeWeComAIBot.url_check('echo-4711')}")
    message = fake_aibot.message("hi")

    forged = post(bot, message, token="not-the-token")
    stale = post(bot, message, timestamp=1_600_000_000)
    other_bot = post(bot, fake_aibot.message("hi", aibotid="aib-someone-else"))

    assert (check.status_code, check.content) == (200, b"echo-4711")
    assert [forged.status_code, stale.status_code, other_bot.status_code] == [401, 401, 401]
    assert not EventLog.objects.exists()
    assert dict(InboundRefusal.objects.values_list("reason", "count")) == {"forged": 2, "replayed": 1}


@pytest.mark.django_db
def test_a_message_is_answered_with_a_stream_and_a_redelivery_is_one_event_on_the_same_stream(bot, fake_aibot):
    message = fake_aibot.message("what is new?", group="wrkGroup1", user="bo")

    first = post(bot, message)
    again = post(bot, message)

    opened = FakeWeComAIBot.opened(first.content)
    assert opened["msgtype"] == "stream"
    assert (opened["stream"]["finish"], opened["stream"]["content"]) == (False, "")
    assert FakeWeComAIBot.opened(again.content)["stream"]["id"] == opened["stream"]["id"]
    event = EventLog.objects.get()
    assert (event.input or {}).get("text") == "what is new?"
    assert event.conversation_id == f"bot:{bot.bot_id}:wrkGroup1"
    assert event.data["reply_target"]["extra"]["stream_id"] == opened["stream"]["id"]
    # The response URL lets its holder post into the chat: not in the copy runners read.
    assert "response_url" not in event.data["raw"]
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_a_message_no_binding_answers_is_finished_at_once_and_an_unknown_stream_too(workspace, aibot_for, fake_aibot):
    bot = aibot_for(workspace)  # no binding in the workspace

    answer = FakeWeComAIBot.opened(post(bot, fake_aibot.message("anyone?")).content)

    assert answer["stream"]["finish"] is True
    assert poll(bot, "no-such-stream") == {"id": "no-such-stream", "finish": True, "content": ""}


@pytest.mark.django_db
def test_a_picture_is_decrypted_into_an_input_artifact(
    bot, fake_aibot, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    url = fake_aibot.add_file("board.jpg", b"\xff\xd8\xff a board")

    with django_capture_on_commit_callbacks(execute=True):
        answer = post(bot, fake_aibot.message(msgtype="image", content={"url": url}))

    assert answer.status_code == 200
    (ref,) = (EventLog.objects.get().input or {})["attachments"]
    stored = Artifact.objects.get(artifact_id=ref["artifact_id"])
    assert stored.size == len(b"\xff\xd8\xff a board")


@pytest.mark.django_db
def test_a_card_click_is_a_card_clicked_event(bot, fake_aibot):
    click = fake_aibot.message(msgtype="event", content=None, user="cy")
    click["event"] = {
        "eventtype": "template_card_event",
        "template_card_event": {"event_key": "approve", "task_id": "t-1"},
    }

    assert post(bot, click).status_code == 200

    event = EventLog.objects.get()
    assert (event.event_type, event.data["action"], event.data["target_message_id"]) == (
        "card.clicked",
        {"event_key": "approve", "task_id": "t-1"},
        "t-1",
    )


# -- delivery ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_the_runs_deltas_are_what_the_next_poll_returns_and_the_last_poll_says_finish(bot, fake_aibot):
    message = fake_aibot.message("count to three")
    first = await sync_to_async(post)(bot, message)
    stream_id = FakeWeComAIBot.opened(first.content)["stream"]["id"]
    run = await Run.objects.aget(bot=bot)
    port = PlatformDeliveryPort()

    port.results_observe(run=run, events=[_delta("one, "), _delta("two, ")], ended=False)
    seen = []
    for _ in range(100):
        seen.append(await sync_to_async(poll)(bot, stream_id))
        if seen[-1]["content"] == "one, two,":
            break
        await asyncio.sleep(0.05)
    port.results_observe(run=run, events=[_delta("three"), _completed("one, two, three")], ended=True)
    await port.wait_idle()
    last = await sync_to_async(poll)(bot, stream_id)

    assert seen[-1] == {"id": stream_id, "finish": False, "content": "one, two,"}
    assert all(not s["finish"] for s in seen)
    assert last == {"id": stream_id, "finish": True, "content": "one, two, three"}
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db(transaction=True)
async def test_a_reply_longer_than_one_stream_message_sends_its_rest_through_the_response_url(aibot_for, fake_aibot):
    @sync_to_async
    def setup() -> tuple[Bot, dict[str, Any], str]:
        workspace = WorkspaceFactory.create()
        AgentBindingFactory.create(workspace=workspace, delivery_policy={"enable_reply": True})
        bot = aibot_for(workspace)
        message = fake_aibot.message("write a lot")
        return bot, message, FakeWeComAIBot.opened(post(bot, message).content)["stream"]["id"]

    bot, message, stream_id = await setup()
    run = await Run.objects.aget(bot=bot)
    reply = "这是一句很长的回答。" * 1000  # 30,000 bytes in UTF-8

    port = PlatformDeliveryPort()
    port.results_observe(run=run, events=[_completed(reply)], ended=True)
    await port.wait_idle()

    streamed = await sync_to_async(poll)(bot, stream_id)
    (rest,) = fake_aibot.posted(message)
    assert streamed["finish"] is True
    assert len(streamed["content"].encode()) <= 20480
    assert rest["msgtype"] == "markdown"
    assert (streamed["content"] + rest["markdown"]["content"]).replace(" ", "") == reply
    assert (await PlatformDelivery.objects.aget(run=run)).status == "delivered"


@pytest.mark.django_db
def test_no_body_signed_or_not_makes_the_webhook_answer_500(bot, caplog, settings):
    settings.LANGBOT_INBOUND_REFUSAL_WINDOW_SECONDS = 10**9
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=8,
    )
    base = {"msgid": "m1", "aibotid": AIBOT_ID, "chattype": "single", "from": {"userid": "u"}, "msgtype": "text"}

    @fuzz_settings(max_examples=60)
    @given(
        plain=st.builds(
            lambda k, v: {**base, k: v}, st.sampled_from([*base, "text", "mixed", "stream", "event"]), json_values
        ),
        raw=st.binary(max_size=48),
        sealed=st.booleans(),
    )
    def never_a_server_error(plain: dict[str, Any], raw: bytes, sealed: bool) -> None:
        caplog.clear()
        if sealed:
            answer = post(bot, plain)
        else:
            answer = Client().post(
                f"{webhook_url(bot)}?msg_signature=x&timestamp=1&nonce=2", data=raw, content_type="application/json"
            )
        assert answer.status_code < 500, answer.content
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    never_a_server_error()


def test_the_credentials_schema_wants_the_token_and_a_43_character_key():
    from platforms.adapters.wecom_aibot import WeComAIBotAdapter

    problems = WeComAIBotAdapter.credentials_problems({"token": "t", "encoding_aes_key": "short"})

    assert set(problems) == {"credentials.encoding_aes_key"}
    assert WeComAIBotAdapter.credentials_problems({"token": "t", "encoding_aes_key": ENCODING_AES_KEY}) == {}
    assert json.dumps(WeComAIBotAdapter.credentials_json_schema())  # serialisable for the bot form
