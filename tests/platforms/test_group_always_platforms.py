"""Group chatter on Telegram, Slack, Discord, Lark and OneBot: a group message that does not address the
bot reaches the gateway with `data.mentioned: false` through each platform's own inbound path (webhook,
or the connector's parse of a gateway dispatch / NapCat push), so a binding with `trigger_policy.group_always`
answers it once however often the platform delivers it, while a binding without it leaves it alone and
the event log never sees it. A message addressing the bot is still answered by the default policy."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from bindings.models import Bot
from platforms.adapters.discord import DiscordAdapter
from platforms.adapters.onebot import OneBotAdapter
from platforms.inbound import platform_update_accept
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory
from tests.fakes.discord_server import BOT_USER_ID as DISCORD_BOT_USER_ID
from tests.fakes.discord_server import TOKEN as DISCORD_TOKEN
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.lark_server import APP_ID, APP_SECRET, BOT_OPEN_ID, VERIFICATION_TOKEN, FakeLark
from tests.fakes.platform_http import serving
from tests.fakes.slack_server import BOT_TOKEN as SLACK_TOKEN
from tests.fakes.slack_server import BOT_USER_ID as SLACK_BOT_USER_ID
from tests.fakes.slack_server import SIGNING_SECRET, FakeSlack, sign
from tests.platforms.conftest import post_update
from transcripts.models import EventLog

ONEBOT_SELF_ID = 10001


def _post(bot: Bot, platform: str, body: bytes, headers: dict[str, str] | None = None) -> None:
    answer = Client().post(
        f"/platforms/{platform}/{bot.workspace.slug}/{bot.bot_id}/webhook",
        data=body,
        content_type="application/json",
        headers=headers or {},
    )
    assert answer.status_code == 200


class Telegram:
    def __init__(self, fake: Any, bot_for: Callable[..., Bot]) -> None:
        self.fake, self.bot_for = fake, bot_for

    def bot(self, workspace: Any) -> Bot:
        return self.bot_for(workspace)

    def chatter(self) -> dict[str, Any]:
        return self.fake.message_update("people talking", chat_id=-100900, chat_type="supergroup")

    def mention(self) -> dict[str, Any]:
        text = "@langbot_test_bot what now"
        entities = [{"type": "mention", "offset": 0, "length": len("@langbot_test_bot")}]
        return self.fake.message_update(text, chat_id=-100900, chat_type="supergroup", entities=entities)

    def deliver(self, bot: Bot, update: dict[str, Any]) -> None:
        assert post_update(bot, update).status_code == 200


class Slack:
    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake

    def bot(self, workspace: Any) -> Bot:
        credentials = {
            "bot_token": SLACK_TOKEN,
            "signing_secret": SIGNING_SECRET,
            "api_base_url": f"{self.fake.origin}/api",
        }
        return BotFactory.create(workspace=workspace, platform="slack", credentials=credentials)

    def chatter(self) -> dict[str, Any]:
        return self.fake.event_payload("people talking", channel="C0GENERAL", channel_type="channel")

    def mention(self) -> dict[str, Any]:
        return self.fake.event_payload(
            f"<@{SLACK_BOT_USER_ID}> what now", event_type="app_mention", channel="C0GENERAL"
        )

    def deliver(self, bot: Bot, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        _post(bot, "slack", body, sign(body))


class Discord:
    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake

    def bot(self, workspace: Any) -> Bot:
        credentials = {"token": DISCORD_TOKEN, "api_base_url": self.fake.api_base_url}
        return BotFactory.create(workspace=workspace, platform="discord", credentials=credentials)

    def chatter(self) -> dict[str, Any]:
        return self.fake.message_create("people talking", guild_id="200000000000000001")

    def mention(self) -> dict[str, Any]:
        return self.fake.message_create(
            f"<@{DISCORD_BOT_USER_ID}> what now", guild_id="200000000000000001", mention_bot=True
        )

    def deliver(self, bot: Bot, message: dict[str, Any]) -> None:
        # What the connector does with a MESSAGE_CREATE dispatch.
        adapter = DiscordAdapter(bot_id=bot.bot_id, credentials=bot.credentials)
        update = adapter.message_update(message, bot_user_id=DISCORD_BOT_USER_ID)
        assert update is not None
        platform_update_accept(bot=bot, update=update)


class Lark:
    def __init__(self, fake: FakeLark) -> None:
        self.fake = fake

    def bot(self, workspace: Any) -> Bot:
        credentials = {
            "app_id": APP_ID,
            "app_secret": APP_SECRET,
            "verification_token": VERIFICATION_TOKEN,
            "api_base_url": self.fake.origin,
            "bot_open_id": BOT_OPEN_ID,
        }
        return BotFactory.create(workspace=workspace, platform="lark", credentials=credentials)

    def chatter(self) -> dict[str, Any]:
        someone_else = {"key": "@_user_1", "id": {"open_id": "ou_bob"}, "name": "Bob"}
        return self.fake.message_event(
            "@_user_1 lunch?", chat_id="oc_group", chat_type="group", mentions=[someone_else]
        )

    def mention(self) -> dict[str, Any]:
        return self.fake.message_event(
            "@_user_1 what now", chat_id="oc_group", chat_type="group", mentions=[self.fake.bot_mention()]
        )

    def deliver(self, bot: Bot, push: dict[str, Any]) -> None:
        _post(bot, "lark", json.dumps(push).encode())


class OneBot:
    def __init__(self) -> None:
        self.next_id = iter(range(5000, 10**9))

    def bot(self, workspace: Any) -> Bot:
        return BotFactory.create(workspace=workspace, platform="qq", credentials={"access_token": "t"})

    def _event(self, *segments: dict[str, Any]) -> dict[str, Any]:
        return {
            "time": 1764400000,
            "self_id": ONEBOT_SELF_ID,
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": next(self.next_id),
            "group_id": 30003,
            "user_id": 20002,
            "message": list(segments),
            "sender": {"user_id": 20002, "nickname": "Ada", "card": ""},
        }

    def chatter(self) -> dict[str, Any]:
        return self._event({"type": "text", "data": {"text": "people talking"}})

    def mention(self) -> dict[str, Any]:
        return self._event(
            {"type": "at", "data": {"qq": str(ONEBOT_SELF_ID)}}, {"type": "text", "data": {"text": " what now"}}
        )

    def deliver(self, bot: Bot, event: dict[str, Any]) -> None:
        # What the reverse WebSocket / HTTP POST endpoint does with a NapCat push.
        update = OneBotAdapter(bot_id=bot.bot_id, credentials=bot.credentials).event_update(event)
        assert update is not None
        platform_update_accept(bot=bot, update=update)


@pytest.fixture(params=["telegram", "slack", "discord", "lark", "onebot"])
def platform(request: Any) -> Iterator[Any]:
    if request.param == "telegram":
        yield Telegram(request.getfixturevalue("fake_telegram"), request.getfixturevalue("telegram_bot_for"))
    elif request.param == "slack":
        with serving(FakeSlack()) as slack:
            yield Slack(slack)
    elif request.param == "discord":
        with serving(FakeDiscord()) as discord:
            yield Discord(discord)
    elif request.param == "lark":
        with serving(FakeLark()) as lark:
            yield Lark(lark)
    else:
        yield OneBot()


@pytest.mark.django_db
def test_group_chatter_is_answered_once_by_a_binding_with_group_always(platform, workspace):
    binding = AgentBindingFactory.create(workspace=workspace, trigger_policy={"group_always": True})
    bot = platform.bot(workspace)
    chatter = platform.chatter()

    platform.deliver(bot, chatter)
    platform.deliver(bot, chatter)  # the platform delivers it again

    event = EventLog.objects.get(bot=bot)
    assert event.status == EventLog.Status.ACCEPTED
    assert event.data["mentioned"] is False
    assert "people talking" in event.input["text"] or "lunch?" in event.input["text"]
    (run,) = Run.objects.filter(event=event)
    assert run.binding_id == binding.pk


@pytest.mark.django_db
def test_group_chatter_is_left_alone_and_unrecorded_without_group_always(platform, workspace):
    AgentBindingFactory.create(workspace=workspace)
    bot = platform.bot(workspace)

    platform.deliver(bot, platform.chatter())
    platform.deliver(bot, platform.mention())

    # Only the message that addresses the bot is recorded, and only it is answered.
    event = EventLog.objects.get(bot=bot)
    assert event.data["mentioned"] is True
    assert event.input["text"] == "what now"
    assert Run.objects.filter(bot=bot).count() == 1


@pytest.mark.django_db
def test_a_file_in_group_chatter_no_binding_takes_is_never_downloaded(
    workspace, monkeypatch, django_capture_on_commit_callbacks
):
    from artifacts.models import Artifact
    from platforms.tasks import platform_update_ingest

    monkeypatch.setattr(platform_update_ingest, "delay", platform_update_ingest)
    AgentBindingFactory.create(workspace=workspace)
    with serving(FakeSlack()) as fake:
        slack = Slack(fake)
        bot = slack.bot(workspace)
        shared = fake.add_file("holiday.jpg", b"\xff\xd8 a photo", "image/jpeg")
        payload = fake.event_payload("look", channel="C0GENERAL", channel_type="channel", files=[shared])

        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            slack.deliver(bot, payload)

    assert callbacks  # the file-fetching task ran, and stopped before fetching
    assert not Artifact.objects.exists()
    assert not EventLog.objects.exists()
