"""`seed_demo` creates the demo bot and its qa-runner binding, once."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from bindings.models import AgentBinding, Bot
from bindings.selectors import binding_resolve_for_event
from bindings.services import binding_runner_config_plain
from tests.factories import RunnerDescriptorFactory

pytestmark = pytest.mark.django_db


def test_seed_demo_creates_the_demo_bot_and_binding_before_the_runner_is_known():
    call_command("seed_demo")

    bot = Bot.objects.get(workspace__slug="demo", bot_id="demo-bot")
    binding = AgentBinding.objects.get(workspace__slug="demo", binding_id="demo-qa")
    assert bot.platform == "webui"
    assert (binding.scope_type, binding.scope_id) == ("bot", "demo-bot")
    assert binding.event_types == ["message.received"]
    assert binding.runner_id == "plugin:langbot/qa-runner/default"
    assert binding_runner_config_plain(binding) == {"behaviour": "ok"}
    assert binding.config_validated is False
    resolution = binding_resolve_for_event(workspace=bot.workspace, event_type="message.received", bot_id="demo-bot")
    assert resolution.replying == binding


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
