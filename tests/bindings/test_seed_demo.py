"""`seed_demo` creates the demo bot and its qa-runner binding, once."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from bindings.models import AgentBinding, Bot, Workspace
from bindings.selectors import binding_resolve_for_event
from bindings.services import binding_runner_config_plain
from tests.factories import AgentBindingFactory, RunnerDescriptorFactory

pytestmark = pytest.mark.django_db


def test_seed_demo_creates_the_demo_bot_and_binding_before_the_runner_is_known():
    call_command("seed_demo")

    bot = Bot.objects.get(workspace__slug="demo", bot_id="demo-bot")
    binding = AgentBinding.objects.get(workspace__slug="demo", binding_id="demo-qa")
    assert bot.platform == "webui"
    assert binding.scope_type == "workspace"
    assert binding.event_types == ["message.received"]
    assert binding.runner_id == "plugin:langbot/qa-runner/default"
    assert binding_runner_config_plain(binding) == {"behaviour": "ok"}
    assert binding.config_validated is False
    resolution = binding_resolve_for_event(workspace=bot.workspace, event_type="message.received", bot_id="demo-bot")
    assert resolution.replying == binding


def test_the_demo_binding_answers_the_chats_default_target_and_yields_to_a_bot_binding():
    # The debug chat's "Workspace default" sends no bot: the seeded demo must answer it, by the resolver's rules.
    call_command("seed_demo")
    workspace = Bot.objects.get(bot_id="demo-bot").workspace

    default = binding_resolve_for_event(workspace=workspace, event_type="message.received", bot_id=None)
    assert default.replying is not None
    assert default.replying.binding_id == "demo-qa"

    AgentBindingFactory.create(workspace=workspace, binding_id="bot-own", scope_type="bot", scope_id="demo-bot")
    to_bot = binding_resolve_for_event(workspace=workspace, event_type="message.received", bot_id="demo-bot")
    assert to_bot.replying is not None
    assert to_bot.replying.binding_id == "bot-own"


def test_seed_demo_validates_when_the_qa_runner_is_known():
    RunnerDescriptorFactory.create(
        plugin_author="langbot",
        plugin_name="qa-runner",
        runner_name="default",
        config_schema=[{"name": "behaviour", "label": "Behaviour", "type": "string", "default": "ok"}],
    )

    call_command("seed_demo")

    assert AgentBinding.objects.get(binding_id="demo-qa").config_validated is True


def test_seed_demo_is_idempotent_and_keeps_operator_edits():
    call_command("seed_demo")
    AgentBinding.objects.filter(binding_id="demo-qa").update(priority=7)

    call_command("seed_demo")

    assert Bot.objects.filter(bot_id="demo-bot").count() == 1
    assert AgentBinding.objects.get(binding_id="demo-qa").priority == 7


def test_an_unchecked_binding_is_validated_once_its_runner_is_known():
    from bindings.services import bindings_revalidate_for_runner

    call_command("seed_demo")
    RunnerDescriptorFactory.create(
        plugin_author="langbot",
        plugin_name="qa-runner",
        runner_name="default",
        config_schema=[
            {"name": "behaviour", "label": "Behaviour", "type": "string", "default": "ok"},
            {"name": "delta_count", "label": "Deltas", "type": "integer", "default": 5},
        ],
    )

    validated = bindings_revalidate_for_runner(runner_id="plugin:langbot/qa-runner/default")

    binding = AgentBinding.objects.get(binding_id="demo-qa")
    assert validated == ["demo-qa"]
    assert binding.config_validated is True
    assert binding_runner_config_plain(binding) == {"behaviour": "ok", "delta_count": 5}


def test_the_demo_workspace_it_creates_may_reach_a_local_model_and_an_operators_withdrawal_is_kept():
    # the demo workspace is the operator's own: a local Ollama on 127.0.0.1 is its README's example
    call_command("seed_demo")
    demo = Workspace.objects.get(slug="demo")
    assert demo.allow_private_addresses is True
    # an operator who withdraws it keeps their choice across later seeds (`make run` seeds every time)
    Workspace.objects.filter(pk=demo.pk).update(allow_private_addresses=False)
    call_command("seed_demo")
    assert Workspace.objects.get(pk=demo.pk).allow_private_addresses is False
