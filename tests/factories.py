"""factory_boy factories for host models."""

from __future__ import annotations

import uuid

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User

from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from platforms.webhooks.models import WebhookEndpoint
from platforms.webhooks.signing import secret_generate
from resources.models import Model, ModelProvider
from runners.models import Run
from transcripts.models import EventLog


class WorkspaceFactory(factory.django.DjangoModelFactory[Workspace]):
    class Meta:
        model = Workspace
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"ws-{n}")
    name = factory.LazyAttribute(lambda o: f"Workspace {o.slug}")


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.LazyFunction(lambda: make_password("pw"))


class BotFactory(factory.django.DjangoModelFactory[Bot]):
    class Meta:
        model = Bot

    workspace = factory.SubFactory(WorkspaceFactory)
    bot_id = factory.Sequence(lambda n: f"bot-{n}")
    name = factory.LazyAttribute(lambda o: f"Bot {o.bot_id}")
    platform = Bot.Platform.WEBUI
    credentials = factory.LazyFunction(dict)


class RunnerDescriptorFactory(factory.django.DjangoModelFactory[RunnerDescriptor]):
    """A runner as if the runtime had reported it; `config_schema` is a list of form item dicts."""

    class Meta:
        model = RunnerDescriptor
        django_get_or_create = ("runner_id",)

    plugin_author = "tester"
    plugin_name = factory.Sequence(lambda n: f"plugin-{n}")
    runner_name = "default"
    runner_id = factory.LazyAttribute(lambda o: f"plugin:{o.plugin_author}/{o.plugin_name}/{o.runner_name}")
    plugin_version = "1.0.0"
    label = factory.LazyAttribute(lambda o: {"en_US": o.plugin_name})
    config_schema = factory.LazyFunction(list)
    status = RunnerDescriptor.Status.AVAILABLE


class AgentBindingFactory(factory.django.DjangoModelFactory[AgentBinding]):
    """A stored binding, written directly (no validation): for tests of readers such as the resolver."""

    class Meta:
        model = AgentBinding

    workspace = factory.SubFactory(WorkspaceFactory)
    binding_id = factory.Sequence(lambda n: f"binding-{n}")
    scope_type = AgentBinding.ScopeType.WORKSPACE
    scope_id = factory.LazyAttribute(lambda o: o.workspace.slug if o.workspace else "")
    event_types = factory.LazyFunction(lambda: ["message.received"])
    runner_id = "plugin:tester/runner/default"
    runner_config = factory.LazyFunction(dict)
    runner_secrets = factory.LazyFunction(dict)
    delivery_policy = factory.LazyFunction(lambda: {"enable_reply": True})
    priority = 0
    enabled = True


class ModelProviderFactory(factory.django.DjangoModelFactory[ModelProvider]):
    class Meta:
        model = ModelProvider

    workspace = factory.SubFactory(WorkspaceFactory)
    provider_id = factory.Sequence(lambda n: f"provider-{n}")
    name = factory.LazyAttribute(lambda o: f"Provider {o.provider_id}")
    base_url = "http://127.0.0.1:9/v1"
    api_key = "sk-test-key"
    headers = factory.LazyFunction(dict)


class ModelFactory(factory.django.DjangoModelFactory[Model]):
    class Meta:
        model = Model

    provider = factory.SubFactory(ModelProviderFactory)
    workspace = factory.LazyAttribute(lambda o: o.provider.workspace)
    model_id = factory.Sequence(lambda n: f"model-{n}")
    name = "gpt-4o-mini"
    kind = Model.Kind.LLM


class WebhookEndpointFactory(factory.django.DjangoModelFactory[WebhookEndpoint]):
    """A completion webhook endpoint subscribed to every run end, with a fresh `whsec_` secret."""

    class Meta:
        model = WebhookEndpoint

    workspace = factory.SubFactory(WorkspaceFactory)
    url = "http://127.0.0.1:9/hooks"
    event_types = factory.LazyFunction(lambda: ["run.cancelled", "run.completed", "run.failed"])
    secret = factory.LazyFunction(secret_generate)
    enabled = True


def running_run(workspace: Workspace, conversation_id: str) -> Run:
    """A run of its own `parallel` binding, running under a fresh lease in `conversation_id` ("" for none), as a
    worker holds it while the results are written."""
    binding = AgentBindingFactory.create(workspace=workspace, concurrency_policy="parallel")
    event = EventLog.objects.create(
        workspace=workspace, event_id=f"e-{uuid.uuid4().hex[:8]}", event_type="message.received", source="api",
        conversation_id=conversation_id,
    )  # fmt: skip
    return Run.objects.create(
        workspace=workspace, event=event, binding=binding, binding_key=binding.binding_id, runner_id=binding.runner_id,
        conversation_id=conversation_id, status=Run.Status.RUNNING, lease_token=uuid.uuid4(),
    )  # fmt: skip
