"""Human takeover on Telegram: while an operator holds the chat, the user's message starts no run, and the
operator's reply is sent into the same Telegram chat by the bot and recorded as the bot's side."""

from __future__ import annotations

import pytest

from runners.models import Run
from tests.factories import AgentBindingFactory
from tests.platforms.conftest import post_update
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db


def test_an_operator_replies_in_the_held_telegram_chat(workspace, telegram_bot_for, fake_telegram, api_client):
    AgentBindingFactory.create(workspace=workspace)
    bot = telegram_bot_for(workspace)
    post_update(bot, fake_telegram.message_update("hi", chat_id=4242))
    conversation = Run.objects.get().conversation_id

    assert api_client.post(f"/api/v1/conversations/{conversation}/takeover").status_code == 200
    post_update(bot, fake_telegram.message_update("is anyone there?", chat_id=4242))
    assert Run.objects.count() == 1
    assert EventLog.objects.filter(status=EventLog.Status.HELD).count() == 1

    sent = api_client.post(
        f"/api/v1/conversations/{conversation}/messages", {"text": "Yes, a person is here."}, format="json"
    )
    assert sent.status_code == 201, sent.content
    assert fake_telegram.texts(4242)[-1] == "Yes, a person is here."
    assert sent.json()["platform_message"]["chat_id"] == "4242"
    item = TranscriptItem.objects.get(pk=int(sent.json()["message_id"]))
    assert (item.role, item.conversation_id) == ("assistant", conversation)

    assert api_client.post(f"/api/v1/conversations/{conversation}/release").status_code == 200
    post_update(bot, fake_telegram.message_update("thanks", chat_id=4242))
    assert Run.objects.count() == 2
