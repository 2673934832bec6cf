"""Platform actions (docs/platform-actions.md) of a run that came from Telegram act in its chat through the adapter:
`message.send` posts a message, `message.edit` changes one, `reaction.add` reacts; another chat is refused."""

from __future__ import annotations

from typing import Any

import pytest

from runners.actions.platform_actions import platform_action_submit
from runners.models import PlatformActionRequest, Run
from tests.factories import AgentBindingFactory
from tests.platforms.conftest import post_update

pytestmark = pytest.mark.django_db
ALLOWED = {"actions": ["message.send", "message.edit", "reaction.add"], "require_action_approval": False}


@pytest.fixture
def run(workspace, telegram_bot_for, fake_telegram) -> Run:
    AgentBindingFactory.create(workspace=workspace)
    bot = telegram_bot_for(workspace)
    post_update(bot, fake_telegram.message_update("hi", chat_id=4242))
    return Run.objects.select_related("bot", "event").get()


def _act(run: Run, action: str, target: dict[str, Any], payload: dict[str, Any]) -> PlatformActionRequest:
    return platform_action_submit(
        run=run, capabilities=ALLOWED, action=action, target=target, payload=payload,
        origin=PlatformActionRequest.Origin.PROXY,
    )  # fmt: skip


def test_send_edit_and_react_act_in_the_runs_telegram_chat(run, fake_telegram):
    sent = _act(run, "message.send", {}, {"text": "a note"})
    assert sent.status == PlatformActionRequest.Status.EXECUTED
    assert sent.result is not None
    message_id = sent.result["message_id"]

    edited = _act(run, "message.edit", {"message_id": message_id}, {"text": "a better note"})
    reacted = _act(run, "reaction.add", {"message_id": message_id}, {"reaction": "👍"})

    assert (edited.status, reacted.status) == (PlatformActionRequest.Status.EXECUTED,) * 2
    assert fake_telegram.texts(4242) == ["a better note"]
    (reaction,) = fake_telegram.calls_of("setMessageReaction")
    assert reaction.params["reaction"] == [{"type": "emoji", "emoji": "👍"}]
    assert reaction.params["message_id"] == int(message_id)


def test_an_action_in_another_chat_or_a_platform_error_fails_with_its_code(run, fake_telegram):
    elsewhere = _act(run, "message.send", {"chat_id": "999"}, {"text": "spam"})
    fake_telegram.rate_limit_next("sendMessage", retry_after=3)
    limited = _act(run, "message.send", {}, {"text": "too fast"})

    assert (elsewhere.status, elsewhere.error and elsewhere.error["code"]) == ("failed", "not_found")
    assert (limited.status, limited.error and limited.error["code"]) == ("failed", "runtime_error")
    assert fake_telegram.texts(4242) == []
