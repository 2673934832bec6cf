"""Events beyond messages (docs/platform-events.md), posted to the real webhooks as each platform sends them
or dispatched on Discord's fake gateway: each becomes one envelope of the shared shape (who in `actor`, the
chat in `data.chat_id`, the message in `data.target_message_id`, the emoji in `data.reaction`, the click
in `data.action`), once however often it is delivered; bindings listen to them like messages (a
`message.received` binding does not answer a reaction; a `member.joined` one greets in the group even
though its group rule asks for mentions); Slack's thread follow-ups; Lark's card callback answered with
its toast; Discord's slash command deferred and answered by editing the deferred response."""

# ruff: noqa: F811 - the fixtures imported from the platforms' own test modules are asked for by name

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client

from bindings.models import Bot
from platforms.adapters.discord import DiscordAdapter
from platforms.adapters.slack import SlackAdapter
from platforms.delivery import PlatformDeliveryPort
from platforms.interface import PLATFORM_EVENT_TYPES, ReplyTarget
from platforms.registry import adapter_classes
from runners.models import Run
from tests.factories import AgentBindingFactory, WorkspaceFactory
from tests.fakes.discord_server import BOT_USER_ID as DISCORD_BOT_ID
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.slack_server import BOT_USER_ID as SLACK_BOT_ID
from tests.fakes.slack_server import SIGNING_SECRET, sign
from tests.fakes.telegram_server import BOT_USER_ID as TELEGRAM_BOT_ID
from tests.fakes.telegram_server import FakeTelegram
from tests.platforms.conftest import post_update
from tests.platforms.test_delivery_policy import _completed, _deliver, fast_pace  # noqa: F401
from tests.platforms.test_discord import (  # noqa: F401 (fixtures)
    _until,
    connectors,
    discord_bot_for,
    fake_discord,
    fast_reconnect,
)
from tests.platforms.test_lark import fake_lark, lark_bot_for, post_push  # noqa: F401 (fixtures)
from tests.platforms.test_slack import fake_slack, post_event, slack_bot_for  # noqa: F401 (fixtures)
from tests.platforms.test_telegram_e2e import _delivery, _run_of
from transcripts.models import EventLog

GROUP = -100123
ADA = {"id": 4242, "is_bot": False, "first_name": "Ada", "last_name": "Lovelace", "username": "ada"}
NOW = int(time.time())


def _actor(event: EventLog) -> dict[str, Any]:
    return event.actor or {}


def _events() -> dict[str, EventLog]:
    return {e.event_type: e for e in EventLog.objects.order_by("id")}


def _group() -> dict[str, Any]:
    return {"id": GROUP, "type": "supergroup", "title": "Analytical engines"}


def _member_update(update_id: int, user: dict[str, Any], old: str, new: str, *, own: bool = False) -> dict[str, Any]:
    change = {
        "chat": _group(),
        "from": {"id": 7, "is_bot": False, "first_name": "Charles"},
        "date": NOW,
        "old_chat_member": {"user": user, "status": old},
        "new_chat_member": {"user": user, "status": new},
    }
    return {"update_id": update_id, "my_chat_member" if own else "chat_member": change}


# -- the shape, declared and kept --------------------------------------------------------------------


def test_every_adapter_declares_only_the_pinned_event_types():
    for platform, cls in adapter_classes().items():
        declared = cls.capabilities.event_types
        assert set(declared) <= set(PLATFORM_EVENT_TYPES), platform
        assert len(set(declared)) == len(declared), platform


def test_an_event_without_text_passes_the_envelope_and_the_group_rules_but_not_the_access_lists():
    from pydantic import ValidationError

    from bindings.triggers import TriggerContext, trigger_filter
    from gateway.envelope import EventEnvelopeIn

    recalled = EventEnvelopeIn.model_validate({"event_type": "message.recalled", "data": {"target_message_id": "9"}})
    assert not recalled.is_message
    with pytest.raises(ValidationError):
        EventEnvelopeIn.model_validate({"event_type": "message.edited", "data": {}})  # an edit has its text

    prefixes_only = trigger_filter(
        {"group_mention": False, "group_prefixes": ["!bot"], "access_group_chat_ids": ["g2"]}
    )
    joined = TriggerContext(text="", chat_kind="group", mentioned=False, chat_id="g1", user_id="u", is_message=False)
    said = TriggerContext(text="hello", chat_kind="group", mentioned=False, chat_id="g1", user_id="u")
    assert prefixes_only.check(joined) is not None
    assert prefixes_only.check(said) is None
    assert prefixes_only.check(TriggerContext(**{**joined.__dict__, "chat_id": "g2"})) is None  # denied chat


# -- Telegram ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_telegram_member_reaction_edit_click_and_bot_added_become_their_own_events_once(
    workspace, telegram_bot_for, fake_telegram: FakeTelegram
):
    bot = telegram_bot_for(workspace)
    bot_user = {"id": TELEGRAM_BOT_ID, "is_bot": True, "first_name": "Bot"}
    updates = [
        _member_update(801, ADA, "left", "member"),
        _member_update(802, {**ADA, "id": 99}, "member", "left"),
        _member_update(803, bot_user, "left", "member", own=True),
        {
            "update_id": 804,
            "message_reaction": {
                "chat": _group(), "message_id": 55, "user": ADA, "date": NOW,
                "old_reaction": [{"type": "emoji", "emoji": "👎"}], "new_reaction": [{"type": "emoji", "emoji": "👍"}],
            },
        },
        {
            "update_id": 805,
            "edited_message": {
                "message_id": 56, "date": NOW - 5, "edit_date": NOW, "chat": {"id": 4242, "type": "private",
                "first_name": "Ada"}, "from": ADA, "text": "the corrected question",
            },
        },
        {
            "update_id": 806,
            "callback_query": {
                "id": "cbq-1", "from": ADA, "chat_instance": "ci-1", "data": "vote:yes",
                "message": {"message_id": 57, "date": NOW, "chat": _group(), "text": "Vote?", "from": bot_user},
            },
        },
    ]  # fmt: skip

    answers = [post_update(bot, update) for update in updates]
    for update in updates:
        assert post_update(bot, update).status_code == 200  # redelivered: nothing new

    assert {a.status_code for a in answers} == {200}
    # The click is answered in the webhook's response, so the button stops spinning at once.
    assert answers[-1].json() == {"method": "answerCallbackQuery", "callback_query_id": "cbq-1"}

    events = _events()
    assert EventLog.objects.count() == 7
    assert sorted(events) == sorted(
        ["member.joined", "member.left", "bot.added", "reaction.added", "reaction.removed", "message.edited",
         "card.clicked"]
    )  # fmt: skip
    joined = events["member.joined"]
    assert joined.event_id == f"telegram:{bot.bot_id}:801"
    assert (_actor(joined)["actor_id"], _actor(joined)["actor_name"]) == ("4242", "Ada Lovelace")
    assert joined.data["chat_id"] == str(GROUP)
    assert joined.data["reply_target"] == {"chat_id": str(GROUP)}  # the group, not a reply to anything
    assert joined.data["operator_id"] == "7"
    assert _actor(events["member.left"])["actor_id"] == "99"
    assert _actor(events["bot.added"])["actor_id"] == "7"  # who added the bot
    added, removed = events["reaction.added"], events["reaction.removed"]
    assert (added.data["reaction"], added.data["target_message_id"], _actor(added)["actor_id"]) == ("👍", "55", "4242")
    assert removed.data["reaction"] == "👎"
    edited = events["message.edited"]
    assert (edited.input["text"], edited.data["target_message_id"]) == ("the corrected question", "56")
    clicked = events["card.clicked"]
    assert (clicked.data["action"], clicked.data["target_message_id"], clicked.data["chat_id"]) == (
        "vote:yes",
        "57",
        str(GROUP),
    )


@pytest.mark.django_db
def test_telegram_asks_for_the_updates_that_carry_the_events(workspace, telegram_bot_for, fake_telegram):
    from platforms.services import bot_webhook_register

    bot = telegram_bot_for(workspace)
    bot_webhook_register(bot=bot, url="https://host.example/platforms/telegram/x/y/webhook")

    (call,) = fake_telegram.calls_of("setWebhook")
    allowed = call.params["allowed_updates"]
    allowed = json.loads(allowed) if isinstance(allowed, str) else allowed
    assert {"chat_member", "my_chat_member", "message_reaction", "edited_message", "callback_query"} <= set(allowed)


# -- Slack ------------------------------------------------------------------------------------------


def _slack(event_id: str, event: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": "legacy-verification-token",
        "team_id": "T0TEAM",
        "api_app_id": "A0APP",
        "type": "event_callback",
        "event_id": event_id,
        "event_time": NOW,
        "authorizations": [{"team_id": "T0TEAM", "user_id": SLACK_BOT_ID, "is_bot": True}],
        "event": event,
    }


@pytest.mark.django_db
def test_slack_channel_events_become_their_own_events_and_the_bots_own_do_not(workspace, slack_bot_for):
    bot = slack_bot_for(workspace)
    payloads = [
        _slack("Ev01", {"type": "member_joined_channel", "user": "U0ADA", "channel": "C0GEN", "channel_type": "C",
                        "team": "T0TEAM", "inviter": "U0CHARLES"}),
        _slack("Ev02", {"type": "member_left_channel", "user": "U0BOB", "channel": "C0GEN", "channel_type": "C"}),
        _slack("Ev03", {"type": "member_joined_channel", "user": SLACK_BOT_ID, "channel": "C0NEW", "channel_type": "C",
                        "inviter": "U0ADA"}),
        _slack("Ev04", {"type": "reaction_added", "user": "U0ADA", "reaction": "thumbsup", "item_user": SLACK_BOT_ID,
                        "item": {"type": "message", "channel": "C0GEN", "ts": "1700000000.000100"}}),
        _slack("Ev05", {"type": "reaction_removed", "user": "U0ADA", "reaction": "eyes",
                        "item": {"type": "message", "channel": "C0GEN", "ts": "1700000000.000100"}}),
        _slack("Ev06", {"type": "message", "subtype": "message_changed", "channel": "C0GEN", "channel_type": "channel",
                        "message": {"type": "message", "user": "U0ADA", "text": f"<@{SLACK_BOT_ID}> now with numbers",
                                    "ts": "1700000000.000200"},
                        "previous_message": {"type": "message", "user": "U0ADA", "text": "now",
                                             "ts": "1700000000.000200"}}),
        _slack("Ev07", {"type": "message", "subtype": "message_deleted", "channel": "C0GEN", "channel_type": "channel",
                        "deleted_ts": "1700000000.000300",
                        "previous_message": {"type": "message", "user": "U0ADA", "text": "oops"}}),
        # The bot's own reaction and edit: never events.
        _slack("Ev08", {"type": "reaction_added", "user": SLACK_BOT_ID, "reaction": "eyes",
                        "item": {"type": "message", "channel": "C0GEN", "ts": "1700000000.000100"}}),
        _slack("Ev09", {"type": "message", "subtype": "message_changed", "channel": "C0GEN",
                        "message": {"type": "message", "user": SLACK_BOT_ID, "bot_id": "B0", "text": "new"},
                        "previous_message": {"text": "old"}}),
    ]  # fmt: skip

    for payload in [*payloads, payloads[0]]:
        assert post_event(bot, payload).status_code == 200

    events = _events()
    assert EventLog.objects.count() == 7
    assert _actor(events["member.joined"])["actor_id"] == "U0ADA"
    assert events["member.joined"].data["operator_id"] == "U0CHARLES"
    assert events["member.joined"].event_id == f"slack:{bot.bot_id}:Ev01"
    assert (events["bot.added"].data["chat_id"], _actor(events["bot.added"])["actor_id"]) == ("C0NEW", "U0ADA")
    assert _actor(events["member.left"])["actor_id"] == "U0BOB"
    reaction = events["reaction.added"]
    assert (reaction.data["reaction"], reaction.data["target_message_id"]) == ("thumbsup", "1700000000.000100")
    assert events["reaction.removed"].data["reaction"] == "eyes"
    edited = events["message.edited"]
    assert (edited.input["text"], edited.data["mentioned"]) == ("now with numbers", True)
    assert edited.data["reply_target"] == {"chat_id": "C0GEN", "thread_id": "1700000000.000200"}
    recalled = events["message.recalled"]
    assert (recalled.input["text"], recalled.data["target_message_id"]) == (None, "1700000000.000300")
    assert "token" not in recalled.data["raw"]


@pytest.mark.django_db
def test_a_slack_button_click_posted_form_encoded_is_a_card_click(workspace, slack_bot_for):
    bot = slack_bot_for(workspace)
    interaction = {
        "type": "block_actions",
        "token": "legacy-verification-token",
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "user": {"id": "U0ADA", "username": "ada", "name": "ada"},
        "team": {"id": "T0TEAM"},
        "container": {"type": "message", "message_ts": "1700000000.000400", "channel_id": "C0GEN"},
        "channel": {"id": "C0GEN", "name": "general"},
        "message": {"type": "message", "ts": "1700000000.000400", "text": "Approve?"},
        "response_url": "https://hooks.slack.com/actions/T0TEAM/1/secret",
        "actions": [{"action_id": "approve", "block_id": "b1", "type": "button", "value": "yes",
                     "action_ts": "1700000001.000001"}],
    }  # fmt: skip
    body = urlencode({"payload": json.dumps(interaction)}).encode()

    def post() -> Any:
        return Client().post(
            f"/platforms/slack/{bot.workspace.slug}/{bot.bot_id}/webhook",
            data=body,
            content_type="application/x-www-form-urlencoded",
            headers=sign(body, secret=SIGNING_SECRET),
        )

    assert post().status_code == 200
    assert post().status_code == 200
    forged = Client().post(
        f"/platforms/slack/{bot.workspace.slug}/{bot.bot_id}/webhook",
        data=body,
        content_type="application/x-www-form-urlencoded",
        headers=sign(body, secret="not-the-secret"),
    )
    assert forged.status_code == 401

    event = EventLog.objects.get()
    assert event.event_type == "card.clicked"
    assert event.data["action"] == {"action_id": "approve", "block_id": "b1", "value": "yes"}
    assert (event.data["chat_id"], event.data["target_message_id"], _actor(event)["actor_id"]) == (
        "C0GEN",
        "1700000000.000400",
        "U0ADA",
    )
    assert "response_url" not in event.data["raw"]


def _thread_reply(event_id: str, text: str) -> dict[str, Any]:
    return _slack(event_id, {"type": "message", "user": "U0ADA", "text": text, "channel": "C0GEN",
                             "channel_type": "channel", "ts": f"1700000100.{event_id[-3:]}",
                             "thread_ts": "1700000000.000500"})  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_slack_thread_follow_ups_are_answered_without_a_mention_only_when_switched_on_and_answered_before(
    workspace, slack_bot_for
):
    AgentBindingFactory.create(workspace=workspace)
    following = slack_bot_for(workspace, thread_follow_ups=True)
    plain = slack_bot_for(workspace)
    follow_adapter = SlackAdapter(bot_id=following.bot_id, credentials=following.credentials)
    plain_adapter = SlackAdapter(bot_id=plain.bot_id, credentials=plain.credentials)
    thread = ReplyTarget(chat_id="C0GEN", thread_id="1700000000.000500")

    assert post_event(following, _thread_reply("Ev101", "and before the bot spoke?")).status_code == 200
    assert not EventLog.objects.exists()  # a thread the bot has not answered in
    for adapter in (follow_adapter, plain_adapter):
        async_to_sync(adapter.send_text)(thread, "the bot's answer in the thread")
        async_to_sync(adapter.aclose)()
    assert post_event(following, _thread_reply("Ev102", "and what about Tuesday?")).status_code == 200
    assert post_event(plain, _thread_reply("Ev103", "and what about Tuesday?")).status_code == 200
    # A follow-up that mentions the bot also arrives as app_mention: the plain message is not taken twice.
    assert post_event(following, _thread_reply("Ev104", f"<@{SLACK_BOT_ID}> and Wednesday?")).status_code == 200

    event = EventLog.objects.get()
    assert (event.bot_id, event.event_type, event.input["text"]) == (
        following.pk,
        "message.received",
        "and what about Tuesday?",
    )
    assert event.data["reply_target"] == {"chat_id": "C0GEN", "thread_id": "1700000000.000500"}
    assert Run.objects.filter(bot=following).count() == 1


def test_the_yes_no_credentials_take_a_boolean_or_the_admin_forms_text_and_refuse_anything_else():
    base = {"bot_token": "xoxb-1", "signing_secret": "s"}
    for value in (True, "true", "Yes", "off", ""):
        assert SlackAdapter.credentials_problems({**base, "thread_follow_ups": value}) == {}
    assert SlackAdapter.credentials_problems({**base, "thread_follow_ups": "sometimes"}) == {
        "credentials.thread_follow_ups": "Does not look like yes or no (true/false)."
    }
    on = DiscordAdapter(bot_id="d", credentials={"token": "t", "member_events": "yes"})
    off = DiscordAdapter(bot_id="d", credentials={"token": "t", "member_events": "false"})
    assert (on.intents() & (1 << 1), off.intents() & (1 << 1)) == (1 << 1, 0)


# -- Lark -------------------------------------------------------------------------------------------


def _lark(event_id: str, event_type: str, event: dict[str, Any]) -> dict[str, Any]:
    from tests.fakes.lark_server import APP_ID, VERIFICATION_TOKEN

    header = {"event_id": event_id, "event_type": event_type, "create_time": str(NOW * 1000),
              "token": VERIFICATION_TOKEN, "app_id": APP_ID, "tenant_key": "tenant-1"}  # fmt: skip
    return {"schema": "2.0", "header": header, "event": event}


@pytest.mark.django_db
def test_lark_member_bot_reaction_and_recall_events_become_their_own_events(workspace, lark_bot_for):
    bot = lark_bot_for(workspace)
    ada = {"open_id": "ou_ada", "union_id": "on_ada", "user_id": "ada"}
    pushes = [
        _lark("e01", "im.chat.member.user.added_v1", {
            "chat_id": "oc_group", "operator_id": {"open_id": "ou_charles"}, "external": False,
            "users": [{"name": "Ada", "tenant_key": "t", "user_id": ada},
                      {"name": "Bob", "tenant_key": "t", "user_id": {"open_id": "ou_bob"}}]}),
        _lark("e02", "im.chat.member.user.deleted_v1", {
            "chat_id": "oc_group", "operator_id": {"open_id": "ou_carol"},
            "users": [{"name": "Carol", "user_id": {"open_id": "ou_carol"}}]}),
        _lark("e03", "im.chat.member.bot.added_v1", {"chat_id": "oc_new", "operator_id": {"open_id": "ou_ada"},
                                                      "name": "Engines"}),
        _lark("e04", "im.message.reaction.created_v1", {
            "message_id": "om_answer", "reaction_type": {"emoji_type": "THUMBSUP"}, "operator_type": "user",
            "user_id": ada, "action_time": str(NOW * 1000)}),
        _lark("e05", "im.message.reaction.deleted_v1", {
            "message_id": "om_answer", "reaction_type": {"emoji_type": "THUMBSUP"}, "operator_type": "app",
            "app_id": "cli_other"}),
        _lark("e06", "im.message.recalled_v1", {"message_id": "om_oops", "chat_id": "oc_group",
                                                 "recall_time": str(NOW * 1000), "recall_type": "message_owner"}),
        _lark("e07", "im.chat.updated_v1", {"chat_id": "oc_group"}),
    ]  # fmt: skip

    for push in [*pushes, pushes[0]]:
        assert post_push(bot, push).status_code == 200

    assert EventLog.objects.count() == 6
    joined = list(EventLog.objects.filter(event_type="member.joined").order_by("id"))
    assert [_actor(e)["actor_id"] for e in joined] == ["ou_ada", "ou_bob"]
    assert {e.event_id for e in joined} == {f"lark:{bot.bot_id}:e01:ou_ada", f"lark:{bot.bot_id}:e01:ou_bob"}
    assert joined[0].data["operator_id"] == "ou_charles"
    events = _events()
    assert "operator_id" not in events["member.left"].data  # Carol left on her own
    assert (events["bot.added"].data["chat_id"], _actor(events["bot.added"])["actor_id"]) == ("oc_new", "ou_ada")
    reaction = events["reaction.added"]
    assert (reaction.data["reaction"], reaction.data["target_message_id"]) == ("THUMBSUP", "om_answer")
    # The platform names no chat for reactions: the answer goes as a reply to the message reacted to.
    assert reaction.data["reply_target"]["reply_to_message_id"] == "om_answer"
    recalled = events["message.recalled"]
    assert (recalled.data["chat_id"], recalled.data["target_message_id"]) == ("oc_group", "om_oops")


@pytest.mark.django_db
def test_a_lark_card_callback_is_answered_at_once_with_the_toast_and_becomes_a_card_click(workspace, lark_bot_for):
    bot = lark_bot_for(workspace, card_toast="Got it")
    quiet = lark_bot_for(workspace)
    callback = _lark("e10", "card.action.trigger", {
        "operator": {"tenant_key": "t", "open_id": "ou_ada", "user_id": "ada"},
        "token": "c-card-update-token",
        "action": {"value": {"choice": "approve", "ticket": 17}, "tag": "button"},
        "host": "im_message",
        "context": {"open_message_id": "om_card", "open_chat_id": "oc_group"},
    })  # fmt: skip

    answer = post_push(bot, callback)
    silent = post_push(quiet, {**callback, "header": {**callback["header"], "event_id": "e11"}})

    assert answer.status_code == 200
    assert answer.json() == {"toast": {"type": "info", "content": "Got it"}}
    assert silent.json() == {}
    event = EventLog.objects.get(bot=bot)
    assert event.event_type == "card.clicked"
    assert event.data["action"] == {"value": {"choice": "approve", "ticket": 17}, "tag": "button"}
    assert (event.data["chat_id"], event.data["target_message_id"], _actor(event)["actor_id"]) == (
        "oc_group",
        "om_card",
        "ou_ada",
    )


# -- OneBot (HTTP POST) and LINE --------------------------------------------------------------------


@pytest.mark.django_db
def test_onebot_notices_become_member_recall_and_reaction_events(workspace):
    from tests.factories import BotFactory

    bot = BotFactory.create(workspace=workspace, platform="qq", credentials={"access_token": "qq-token"})
    base = {"time": NOW, "self_id": 10001, "post_type": "notice"}
    notices = [
        {**base, "notice_type": "group_increase", "sub_type": "approve", "group_id": 777, "operator_id": 5,
         "user_id": 42},
        {**base, "notice_type": "group_increase", "sub_type": "invite", "group_id": 888, "operator_id": 42,
         "user_id": 10001},
        {**base, "notice_type": "group_decrease", "sub_type": "leave", "group_id": 777, "operator_id": 0,
         "user_id": 43},
        {**base, "notice_type": "group_decrease", "sub_type": "kick_me", "group_id": 999, "operator_id": 5,
         "user_id": 10001},
        {**base, "notice_type": "group_recall", "group_id": 777, "operator_id": 42, "user_id": 42,
         "message_id": 1234},
        {**base, "notice_type": "group_msg_emoji_like", "group_id": 777, "user_id": 42, "message_id": 1235,
         "likes": [{"emoji_id": "76", "count": 1}]},
        {**base, "notice_type": "group_upload", "group_id": 777, "user_id": 42, "file": {"id": "f"}},
    ]  # fmt: skip

    for notice in [*notices, notices[0]]:
        response = Client().post(
            f"/platforms/qq/{workspace.slug}/{bot.bot_id}/webhook",
            data=json.dumps(notice),
            content_type="application/json",
            headers={"Authorization": "Bearer qq-token"},
        )
        assert response.status_code in (200, 204)

    events = _events()
    assert sorted(events) == ["bot.added", "member.joined", "member.left", "message.recalled", "reaction.added"]
    assert EventLog.objects.count() == 5
    joined = events["member.joined"]
    assert (_actor(joined)["actor_id"], joined.data["chat_id"], joined.data["operator_id"]) == ("42", "group:777", "5")
    assert joined.data["reply_target"] == {"chat_id": "group:777"}
    assert (events["bot.added"].data["chat_id"], _actor(events["bot.added"])["actor_id"]) == ("group:888", "42")
    assert events["message.recalled"].data["target_message_id"] == "1234"
    assert (events["reaction.added"].data["reaction"], events["reaction.added"].data["target_message_id"]) == (
        "76",
        "1235",
    )


# -- Discord ----------------------------------------------------------------------------------------


GUILD = "500000000000000009"
SYSTEM_CHANNEL = "300000000000000009"


@pytest.mark.django_db(transaction=True)
async def test_discord_gateway_events_and_a_component_click_become_their_own_events(
    fake_discord: FakeDiscord, discord_bot_for, connectors
):
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(discord_bot_for)(workspace, member_events=True)
    await asyncio.to_thread(fake_discord.wait_ready)
    assert fake_discord.identifies[-1]["intents"] & (1 << 1)  # member events asked for: the members intent
    ada = {"id": "400000000000000001", "username": "ada", "global_name": "Ada"}

    fake_discord.dispatch(
        "GUILD_CREATE",
        {"id": GUILD, "name": "Engines", "system_channel_id": SYSTEM_CHANNEL, "joined_at": "2026-11-29T10:00:00+00:00"},
    )
    fake_discord.dispatch("GUILD_MEMBER_ADD", {"guild_id": GUILD, "user": ada, "roles": []})
    fake_discord.dispatch(
        "MESSAGE_REACTION_ADD",
        {"user_id": ada["id"], "channel_id": SYSTEM_CHANNEL, "message_id": "600", "guild_id": GUILD,
         "emoji": {"id": None, "name": "🔥"}},
    )  # fmt: skip
    fake_discord.dispatch(
        "MESSAGE_REACTION_REMOVE",
        {"user_id": DISCORD_BOT_ID, "channel_id": SYSTEM_CHANNEL, "message_id": "600", "emoji": {"name": "🔥"}},
    )
    fake_discord.dispatch(
        "MESSAGE_UPDATE",
        {"id": "601", "channel_id": "300000000000000001", "author": ada, "content": "fixed typo",
         "edited_timestamp": "2026-11-29T10:01:00+00:00", "mentions": []},
    )  # fmt: skip
    fake_discord.dispatch("MESSAGE_UPDATE", {"id": "602", "channel_id": SYSTEM_CHANNEL, "embeds": []})  # an unfurl
    fake_discord.dispatch("MESSAGE_DELETE", {"id": "603", "channel_id": SYSTEM_CHANNEL, "guild_id": GUILD})
    click = {
        "id": fake_discord.next_id(), "application_id": DISCORD_BOT_ID, "type": 3, "token": "click-token-1",
        "channel_id": SYSTEM_CHANNEL, "guild_id": GUILD, "member": {"user": ada},
        "message": {"id": "604"}, "data": {"custom_id": "vote:yes", "component_type": 2},
    }  # fmt: skip
    fake_discord.dispatch("INTERACTION_CREATE", click)

    events = await _until(lambda: _events() if EventLog.objects.count() >= 6 else None)
    assert sorted(events) == [
        "bot.added", "card.clicked", "member.joined", "message.edited", "message.recalled", "reaction.added"
    ]  # fmt: skip
    assert events["bot.added"].data["chat_id"] == SYSTEM_CHANNEL
    joined = events["member.joined"]
    assert (_actor(joined)["actor_id"], joined.data["chat_id"], joined.data["guild_id"]) == (
        ada["id"],
        SYSTEM_CHANNEL,
        GUILD,
    )
    assert events["reaction.added"].data["reaction"] == "🔥"
    assert events["message.edited"].input["text"] == "fixed typo"
    assert events["message.recalled"].data["target_message_id"] == "603"
    clicked = events["card.clicked"]
    assert clicked.data["action"] == {"custom_id": "vote:yes", "component_type": 2}
    assert "token" not in clicked.data["raw"]
    (callback,) = fake_discord.calls_of("POST /interactions/{id}/click-token-1/callback")
    assert callback.body == {"type": 6}  # acknowledged at once, nothing shown
    assert await EventLog.objects.acount() == 6


@pytest.mark.django_db(transaction=True)
async def test_a_discord_slash_command_is_deferred_then_answered_by_editing_the_response_and_following_up(
    fake_discord: FakeDiscord,
    discord_bot_for,
    connectors,
    fast_pace,
):
    workspace = await database_sync_to_async(WorkspaceFactory.create)()
    await database_sync_to_async(AgentBindingFactory.create)(workspace=workspace)
    bot = await database_sync_to_async(discord_bot_for)(workspace)
    await asyncio.to_thread(fake_discord.wait_ready)
    command = fake_discord.slash_command("ask", ("question", "what is a difference engine?"), guild_id=GUILD)

    fake_discord.dispatch("INTERACTION_CREATE", command)

    event = await _until(lambda: EventLog.objects.first())
    (callback,) = fake_discord.calls_of(f"POST /interactions/{{id}}/{command['token']}/callback")
    assert callback.body == {"type": 5}  # deferred: Discord shows "thinking…"
    assert (event.event_type, event.input["text"], event.data["command"]) == (
        "message.received",
        "/ask what is a difference engine?",
        "ask",
    )
    run = await Run.objects.aget(bot=bot)
    long_answer = "A machine for tabulating polynomials. " * 80  # past Discord's 2,000: the rest follows up
    await _deliver(PlatformDeliveryPort(), run, ([_completed(long_answer.strip())], 0.02))

    texts = fake_discord.interaction_texts(command["token"])
    assert len(texts) >= 2
    assert "".join(texts).replace(" ", "") == long_answer.replace(" ", "")
    assert fake_discord.calls_of(f"PATCH /webhooks/{{id}}/{command['token']}/messages/@original")
    assert fake_discord.texts(command["channel_id"]) == []  # nothing went to the channel directly


def test_a_discord_interaction_reply_edits_its_own_message_through_the_webhook(fake_discord: FakeDiscord):
    adapter = DiscordAdapter(
        bot_id="d", credentials={"token": fake_discord.token, "api_base_url": fake_discord.api_base_url}
    )
    command = fake_discord.slash_command("ask")

    async def go() -> list[str]:
        await adapter.interaction_ack(command)
        update = adapter.interaction_update(command)
        assert update is not None
        target = ReplyTarget.from_event_data(update.envelope["data"])
        assert target is not None
        sent = await adapter.send_text(target, "thinking about it")
        await adapter.edit_text(sent, "a difference engine tabulates polynomials")
        await adapter.aclose()
        return fake_discord.interaction_texts(command["token"])

    assert async_to_sync(go)() == ["a difference engine tabulates polynomials"]


@pytest.mark.django_db
def test_discord_interactions_at_the_webhook_are_signed_answered_in_the_response_and_become_events(
    workspace, discord_bot_for, fake_discord: FakeDiscord
):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    bot = discord_bot_for(workspace, public_key=public)
    unkeyed = discord_bot_for(workspace)

    def post(target: Bot, interaction: dict[str, Any], *, signer: Any = key, stamp: int | None = None) -> Any:
        body = json.dumps(interaction).encode()
        timestamp = str(stamp if stamp is not None else int(time.time()))
        headers = {
            "X-Signature-Ed25519": signer.sign(timestamp.encode() + body).hex(),
            "X-Signature-Timestamp": timestamp,
        }
        url = f"/platforms/discord/{target.workspace.slug}/{target.bot_id}/webhook"
        return Client().post(url, data=body, content_type="application/json", headers=headers)

    command = fake_discord.slash_command("ask", ("question", "why?"), guild_id=GUILD)
    ping = post(bot, {"id": "1", "application_id": DISCORD_BOT_ID, "type": 1, "token": "t", "version": 1})
    deferred = post(bot, command)
    again = post(bot, command)
    forged = post(bot, command, signer=Ed25519PrivateKey.generate())
    stale = post(bot, command, stamp=int(time.time()) - 3600)

    assert (ping.status_code, ping.json()) == (200, {"type": 1})
    assert (deferred.status_code, deferred.json()) == (200, {"type": 5})
    assert again.status_code == 200
    assert (forged.status_code, stale.status_code) == (401, 401)
    assert post(unkeyed, command).status_code == 404  # without a public key only the gateway carries them
    event = EventLog.objects.get()
    assert (event.event_type, event.input["text"]) == ("message.received", "/ask why?")
    assert event.data["reply_target"]["chat_id"].startswith("interaction:")


# -- bindings listen to events like messages ---------------------------------------------------------


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_member_joined_binding_greets_the_newcomer_in_the_group_and_a_message_binding_ignores_reactions(
    worker, qa_binding, telegram_bot_for, fake_telegram: FakeTelegram
):
    # The greeting binding's group rule asks for mentions; a join mentions nobody and is answered anyway.
    greeter = qa_binding(binding_id="greeter", event_types=["member.joined"], trigger_policy={"group_mention": True})
    qa_binding(binding_id="chat", event_types=["message.received"])
    bot = telegram_bot_for(greeter.workspace)

    assert post_update(bot, _member_update(901, ADA, "left", "member")).status_code == 200
    run = _run_of(bot)
    assert run.binding is not None
    assert (run.binding.binding_id, run.status) == ("greeter", Run.Status.COMPLETED)
    assert _delivery(run).status == "delivered"
    assert fake_telegram.texts(GROUP) == [run.output]
    (greeting,) = fake_telegram.calls_of("sendMessage")
    assert "reply_parameters" not in greeting.params  # said to the group, not as a reply

    reaction = {
        "update_id": 902,
        "message_reaction": {"chat": _group(), "message_id": 55, "user": ADA, "date": NOW, "old_reaction": [],
                             "new_reaction": [{"type": "emoji", "emoji": "👍"}]},
    }  # fmt: skip
    assert post_update(bot, reaction).status_code == 200
    event = EventLog.objects.get(event_type="reaction.added")
    assert event.status == EventLog.Status.NO_BINDING
    assert Run.objects.filter(bot=bot).count() == 1
