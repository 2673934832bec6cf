"""Which binding a web chat message asked for reaches, and what the chat says when it cannot."""

from __future__ import annotations

import pytest

from bindings.models import AgentBinding
from runners.models import Run
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.streaming.conftest import chat_caller
from transcripts.models import EventLog
from webchat.chat import ChatCaller, ChatRefusedError, chat_message_submit

pytestmark = pytest.mark.django_db


def _caller(workspace) -> ChatCaller:
    return chat_caller(workspace)


def _send(workspace, binding_id: str, **kwargs):
    return chat_message_submit(
        caller=_caller(workspace), conversation_id="c-1", text="hi", attachments=[], binding_id=binding_id, **kwargs
    )


def test_an_unknown_binding_is_not_found_and_nothing_is_ingested():
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, binding_id="main")

    with pytest.raises(ChatRefusedError) as refused:
        _send(workspace, "nope")

    assert refused.value.code == "not_found"
    assert not EventLog.objects.filter(workspace=workspace).exists()


def test_a_disabled_binding_is_not_routed_and_the_chat_names_the_one_that_answers():
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(workspace=workspace, binding_id="main")
    AgentBindingFactory.create(workspace=workspace, binding_id="off", enabled=False, priority=9)

    with pytest.raises(ChatRefusedError) as refused:
        _send(workspace, "off")

    assert refused.value.code == "binding.not_routed"
    assert refused.value.details["replying_binding_id"] == "main"
    assert not EventLog.objects.filter(workspace=workspace).exists()


def test_a_bot_binding_takes_the_message_as_its_bots():
    workspace = WorkspaceFactory.create()
    bot = BotFactory.create(workspace=workspace)
    AgentBindingFactory.create(workspace=workspace, binding_id="main", priority=9)
    AgentBindingFactory.create(
        workspace=workspace, binding_id="bot-agent", scope_type=AgentBinding.ScopeType.BOT, scope_id=bot.bot_id
    )

    submission = _send(workspace, "bot-agent")

    event = EventLog.objects.get(event_id=submission.event_id)
    [run] = Run.objects.filter(event=event)
    assert event.bot == bot
    assert run.binding_key == "bot-agent"
    assert [s["binding_id"] for s in submission.statuses] == ["bot-agent"]


def test_a_bot_binding_asked_for_with_another_bot_is_refused():
    workspace = WorkspaceFactory.create()
    bot, other = BotFactory.create(workspace=workspace), BotFactory.create(workspace=workspace)
    AgentBindingFactory.create(
        workspace=workspace, binding_id="bot-agent", scope_type=AgentBinding.ScopeType.BOT, scope_id=bot.bot_id
    )

    with pytest.raises(ChatRefusedError) as refused:
        _send(workspace, "bot-agent", bot_id=other.bot_id)

    assert refused.value.code == "invalid_argument"
    assert not EventLog.objects.filter(workspace=workspace).exists()


def test_a_global_binding_answers_a_workspace_without_its_own():
    workspace = WorkspaceFactory.create()
    AgentBindingFactory.create(
        workspace=None, binding_id="everywhere", scope_type=AgentBinding.ScopeType.GLOBAL, scope_id=""
    )

    submission = _send(workspace, "everywhere")

    assert [s["binding_id"] for s in submission.statuses] == ["everywhere"]
