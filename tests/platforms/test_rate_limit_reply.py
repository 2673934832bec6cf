"""A binding's rate limits on a chat platform (fake Telegram): a sender over their limit starts no run and
gets one polite reply per window, however many more messages they send; the others in the chat are not
held back by their limit; a chat's own limit holds back everyone in it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings

from bindings.models import Bot
from gateway.rate_limits import DEFAULT_REPLY, KEY_PREFIX
from runners.lifecycle import services as run_services
from runners.models import Run
from tests.factories import AgentBindingFactory
from tests.platforms.conftest import post_update
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db

GROUP = {"chat_id": -100777, "chat_type": "supergroup"}
MENTION = "@langbot_test_bot"


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    """Binding rows are new in every test but their ids may repeat (SQLite): the counters start empty."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{KEY_PREFIX}:*"):
        client.delete(key)


@pytest.fixture
def send(monkeypatch, django_capture_on_commit_callbacks) -> Callable[[Bot, dict[str, Any]], Any]:
    """Post an update to the bot's webhook as Telegram does and run what its commit runs (the reply is sent
    then), except sending runs to workers: no worker runs here, and the runs' own replies are beside the
    point."""
    monkeypatch.setattr(run_services, "run_dispatch", lambda **_: None)

    def post(bot: Bot, update: dict[str, Any]) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return post_update(bot, update)

    return post


def addressed(fake_telegram, text: str, *, user_id: int):
    return fake_telegram.message_update(
        f"{MENTION} {text}",
        user_id=user_id,
        entities=[{"type": "mention", "offset": 0, "length": len(MENTION)}],
        **GROUP,
    )


def test_a_sender_over_the_limit_gets_one_polite_reply_and_no_run(workspace, telegram_bot_for, fake_telegram, send):
    AgentBindingFactory.create(
        workspace=workspace, trigger_policy={"rate_limit_per_user": {"messages": 2, "seconds": 600}}
    )
    bot = telegram_bot_for(workspace)

    answers = [send(bot, addressed(fake_telegram, f"message {n}", user_id=1001)) for n in range(5)]

    assert [a.status_code for a in answers] == [200] * 5
    statuses = list(EventLog.objects.order_by("id").values_list("status", flat=True))
    assert statuses == ["accepted", "accepted", "rate_limited", "rate_limited", "rate_limited"]
    assert Run.objects.count() == 2
    # One reply for the three messages over the limit, in the group, and nothing else was sent.
    assert fake_telegram.texts(GROUP["chat_id"]) == [str(DEFAULT_REPLY)]
    errors = [
        dict(e or {})
        for e in EventLog.objects.filter(status="rate_limited").order_by("id").values_list("error", flat=True)
    ]
    assert errors[0]["code"] == "rate_limited"
    assert errors[0]["details"]["limit"] == "rate_limit_per_user"
    assert [error["details"]["replied"] for error in errors] == [True, False, False]
    # The messages no runner saw are not in the conversation's history either.
    assert TranscriptItem.objects.filter(role="user").count() == 2


def test_another_sender_in_the_same_chat_is_not_held_back_by_the_first_ones_limit(
    workspace, telegram_bot_for, fake_telegram, send
):
    AgentBindingFactory.create(
        workspace=workspace,
        trigger_policy={
            "rate_limit_per_user": {"messages": 1, "seconds": 600},
            "rate_limit_reply": "Easy there, one at a time.",
        },
    )
    bot = telegram_bot_for(workspace)

    send(bot, addressed(fake_telegram, "first", user_id=2001))
    send(bot, addressed(fake_telegram, "second", user_id=2001))
    other = send(bot, addressed(fake_telegram, "hello", user_id=2002))

    assert other.status_code == 200
    last = EventLog.objects.order_by("id").last()
    assert last is not None
    assert last.status == "accepted"
    assert Run.objects.filter(event=last).count() == 1
    assert fake_telegram.texts(GROUP["chat_id"]) == ["Easy there, one at a time."]


def test_a_chat_over_its_limit_holds_back_every_sender_in_it(workspace, telegram_bot_for, fake_telegram, send):
    AgentBindingFactory.create(
        workspace=workspace, trigger_policy={"rate_limit_per_chat": {"messages": 2, "seconds": 600}}
    )
    bot = telegram_bot_for(workspace)

    for user_id in (3001, 3002, 3003, 3004):
        send(bot, addressed(fake_telegram, "hi", user_id=user_id))
    private = send(bot, fake_telegram.message_update("hi in private", chat_id=3005, user_id=3005))

    assert private.status_code == 200
    statuses = list(EventLog.objects.order_by("id").values_list("status", flat=True))
    assert statuses == ["accepted", "accepted", "rate_limited", "rate_limited", "accepted"]
    errors = [dict(e or {}) for e in EventLog.objects.filter(status="rate_limited").values_list("error", flat=True)]
    assert {error["details"]["limit"] for error in errors} == {"rate_limit_per_chat"}
    assert fake_telegram.texts(GROUP["chat_id"]) == [str(DEFAULT_REPLY)]
    assert fake_telegram.texts(3005) == []


def test_messages_the_binding_does_not_answer_do_not_count(workspace, telegram_bot_for, fake_telegram, send):
    AgentBindingFactory.create(
        workspace=workspace,
        trigger_policy={"rate_limit_per_user": {"messages": 1, "seconds": 600}, "ignore_prefixes": ["#"]},
    )
    bot = telegram_bot_for(workspace)

    send(bot, addressed(fake_telegram, "# a note to self", user_id=4001))
    send(bot, addressed(fake_telegram, "# another", user_id=4001))
    send(bot, addressed(fake_telegram, "a question", user_id=4001))

    assert list(EventLog.objects.order_by("id").values_list("status", flat=True)) == [
        "no_binding",
        "no_binding",
        "accepted",
    ]
    assert fake_telegram.texts(GROUP["chat_id"]) == []
