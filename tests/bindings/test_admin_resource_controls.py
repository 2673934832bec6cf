"""Admin: the binding form offers the workspace's real models, tools and knowledge bases, and edits the
policies with real controls that save exactly the JSON the REST API stores."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from bindings import resource_catalog
from bindings.forms import POLICY_CONTROLLED_KEYS, POLICY_MODELS
from bindings.models import AgentBinding
from bindings.services import binding_create, workspace_member_add
from bindings.specs import BindingIn
from resources.models import KnowledgeBase, MCPServer, MCPTool, Model
from tests.factories import (
    AgentBindingFactory,
    ModelFactory,
    ModelProviderFactory,
    RunnerDescriptorFactory,
    UserFactory,
    WorkspaceFactory,
)

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/bindings/agentbinding/add/"

SELECTOR_SCHEMA: list[dict[str, Any]] = [
    {"name": "model", "label": "Model", "type": "llm-model-selector", "required": True},
    {"name": "embedder", "label": "Embedder", "type": "embedding-model-selector"},
    {"name": "kbs", "label": "Knowledge bases", "type": "knowledge-base-multi-selector"},
    {"name": "kb", "label": "Main knowledge base", "type": "knowledge-base-selector"},
]


@pytest.fixture
def runner(db):
    return RunnerDescriptorFactory.create(
        plugin_author="tester",
        plugin_name="agent",
        config_schema=SELECTOR_SCHEMA,
        permissions={"platform_api": ["message.send", "message.edit"]},
    )


def give_resources(workspace, prefix: str = "") -> None:
    """One LLM, one embedding model, one MCP tool and one knowledge base in `workspace`."""
    provider = ModelProviderFactory.create(workspace=workspace, provider_id=f"{prefix}openai", name="OpenAI")
    ModelFactory.create(provider=provider, model_id=f"{prefix}chat", name="gpt-4o-mini", kind=Model.Kind.LLM)
    ModelFactory.create(
        provider=provider, model_id=f"{prefix}embed", name="text-embedding-3-small", kind=Model.Kind.EMBEDDING
    )
    server = MCPServer.objects.create(workspace=workspace, server_id=f"{prefix}search", name="Search server")
    MCPTool.objects.create(workspace=workspace, server=server, tool_name=f"{prefix}web_search", remote_name="search")
    KnowledgeBase.objects.create(workspace=workspace, kb_id=f"{prefix}handbook", name="Handbook")


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def staff_client(*workspaces) -> Client:
    staff = UserFactory.create(username="staff", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="bindings"))
    for workspace in workspaces:
        workspace_member_add(workspace=workspace, user=staff)
    client = Client()
    client.force_login(staff)
    return client


def form_data(workspace, runner, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "binding_id": "from-admin",
        "name": "Agent",
        "workspace": str(workspace.pk),
        "enabled": "on",
        "scope_type": "workspace",
        "scope_id": "",
        "event_types": "message.received",
        "priority": "0",
        "runner_id": runner.runner_id,
        "cfg__model": "chat",
        "cfg__embedder": "embed",
        "cfg__kbs": ["handbook"],
        "cfg__kb": "handbook",
        "resource_policy__allowed_model_ids": ["chat", "embed"],
        "resource_policy__allowed_tool_names": ["*"],
        "resource_policy__allowed_kb_ids": ["handbook"],
        "resource_policy__storage_areas": ["plugin", "workspace"],
        "resource_policy__platform_actions": ["message.send"],
        "state_policy__enable_state": "on",
        "state_policy__state_scopes": ["conversation", "actor"],
        "delivery_policy__enable_reply": "on",
        "delivery_policy__max_message_size": "2000",
        "trigger_policy__chat_types": ["private", "group"],
        "trigger_policy__group_mention": "on",
        "trigger_policy__strip_prefix": "on",
        "trigger_policy__access_mode": "deny",
        "concurrency_policy": "queue",
        "timeout_seconds": "300",
        "_save": "Save",
    }
    data.update(overrides)
    return data


def choices(form, name: str) -> dict[str, str]:
    """A select's choices as {value: label}, optgroups flattened."""
    flat: dict[str, str] = {}
    for value, label in form.fields[name].choices:
        if isinstance(label, (list, tuple)):
            flat.update(dict(label))
        else:
            flat[value] = label
    return flat


def groups(form, name: str) -> list[str]:
    return [value for value, label in form.fields[name].choices if isinstance(label, (list, tuple))]


def errors(response) -> dict[str, list[str]]:
    context = response.context
    if context is None or "adminform" not in context:
        return {}
    return {name: list(messages) for name, messages in context["adminform"].form.errors.items()}


def posted_as_shown(form) -> dict[str, Any]:
    """What a browser posts when the change form is saved untouched: every field's shown value."""
    data: dict[str, Any] = {"_save": "Save"}
    for name, field in form.fields.items():
        if field.disabled:
            continue
        value = form[name].value()
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = value
    return data


def test_the_form_lists_the_real_models_tools_and_knowledge_bases_of_the_binding_workspace_only(
    admin_client, workspace, runner
):
    give_resources(workspace)
    give_resources(WorkspaceFactory.create(), prefix="other-")

    response = admin_client.get(f"{ADD_URL}?workspace={workspace.pk}&runner_id={runner.runner_id}")

    form = response.context["adminform"].form
    assert choices(form, "cfg__model") == {"": "---------", "chat": "chat — OpenAI/gpt-4o-mini (llm)"}
    assert choices(form, "cfg__embedder") == {
        "": "---------",
        "embed": "embed — OpenAI/text-embedding-3-small (embedding)",
    }
    assert choices(form, "cfg__kbs") == {"handbook": "handbook — Handbook"}
    assert choices(form, "resource_policy__allowed_model_ids") == {
        "*": "all (*)",
        "chat": "chat — OpenAI/gpt-4o-mini (llm)",
        "embed": "embed — OpenAI/text-embedding-3-small (embedding)",
    }
    assert choices(form, "resource_policy__allowed_tool_names") == {
        "*": "all (*)",
        "web_search": "web_search — Search server",
    }
    assert choices(form, "resource_policy__allowed_kb_ids") == {"*": "all (*)", "handbook": "handbook — Handbook"}
    assert choices(form, "resource_policy__platform_actions") == {
        "*": "all (*)",
        "message.send": "message.send",
        "message.edit": "message.edit",
    }
    html = response.content.decode()
    assert '<option value="chat">chat — OpenAI/gpt-4o-mini (llm)</option>' in html
    assert "q.set(&#x27;workspace&#x27;,this.value)" in html  # picking another workspace reloads its lists
    assert 'type="checkbox" name="state_policy__state_scopes" value="conversation"' in html
    assert "other-" not in html


def test_before_a_workspace_is_chosen_staff_see_their_workspaces_resources_grouped(runner):
    first, second, foreign = (WorkspaceFactory.create(slug=slug) for slug in ("first", "second", "foreign"))
    give_resources(first, prefix="first-")
    give_resources(second, prefix="second-")
    give_resources(foreign, prefix="foreign-")
    client = staff_client(first, second)

    page = client.get(f"{ADD_URL}?runner_id={runner.runner_id}")
    refused = client.post(ADD_URL, form_data(foreign, runner, binding_id="sneaky"))

    form = page.context["adminform"].form
    assert groups(form, "resource_policy__allowed_model_ids") == ["workspace first", "workspace second"]
    assert set(choices(form, "cfg__model")) == {"", "first-chat", "second-chat"}
    assert "foreign-" not in page.content.decode()
    assert "workspace" in errors(refused)
    assert "foreign-" not in refused.content.decode()
    assert not AgentBinding.objects.exists()


def test_a_member_of_one_workspace_gets_it_chosen_and_its_resources_listed(runner):
    mine = WorkspaceFactory.create(slug="mine")
    give_resources(mine)
    give_resources(WorkspaceFactory.create(slug="theirs"), prefix="their-")

    page = staff_client(mine).get(f"{ADD_URL}?runner_id={runner.runner_id}")

    form = page.context["adminform"].form
    assert form.initial["workspace"] == mine.pk
    assert set(choices(form, "resource_policy__allowed_kb_ids")) == {"*", "handbook"}


def test_saving_stores_exactly_what_the_rest_api_stores(admin_client, workspace, runner, api_client):
    give_resources(workspace)

    response = admin_client.post(ADD_URL, form_data(workspace, runner))
    created = api_client.post(
        "/api/v1/bindings",
        {
            "binding_id": "from-api",
            "name": "Agent",
            "scope": {"scope_type": "workspace"},
            "event_types": ["message.received"],
            "runner_id": runner.runner_id,
            "runner_config": {"model": "chat", "embedder": "embed", "kbs": ["handbook"], "kb": "handbook"},
            "resource_policy": {
                "allowed_model_ids": ["chat", "embed"],
                "allowed_tool_names": ["*"],
                "allowed_kb_ids": ["handbook"],
                "storage_areas": ["plugin", "workspace"],
                "platform_actions": ["message.send"],
                "require_action_approval": False,
            },
            "state_policy": {"enable_state": True, "state_scopes": ["conversation", "actor"]},
            "delivery_policy": {"enable_streaming": False, "enable_reply": True, "max_message_size": 2000},
        },
        format="json",
    )

    assert response.status_code == 302, errors(response)
    assert created.status_code == 201, created.content
    from_admin = AgentBinding.objects.get(binding_id="from-admin")
    from_api = AgentBinding.objects.get(binding_id="from-api")
    compared = ["runner_config", "resource_policy", "state_policy", "delivery_policy", "concurrency_policy"]
    assert {name: getattr(from_admin, name) for name in compared} == {
        name: getattr(from_api, name) for name in compared
    }
    read_admin = api_client.get("/api/v1/bindings/from-admin").json()
    read_api = api_client.get("/api/v1/bindings/from-api").json()
    for key in ("runner_config", "resource_policy", "state_policy", "delivery_policy"):
        assert read_admin[key] == read_api[key]


def test_a_stored_id_that_no_longer_exists_stays_listed_as_missing_and_saving_keeps_it(admin_client, workspace, runner):
    give_resources(workspace)
    binding = binding_create(
        workspace=workspace,
        spec=BindingIn(
            binding_id="kept",
            event_types=["message.received"],
            runner_id=runner.runner_id,
            runner_config={"model": "retired-llm", "kbs": ["handbook", "archived-kb"]},
            resource_policy={"allowed_model_ids": ["chat", "retired-llm"], "allowed_tool_names": ["old_tool"]},
        ),
    )
    stored = {name: getattr(binding, name) for name in ("runner_config", "resource_policy")}
    url = f"/admin/bindings/agentbinding/{binding.pk}/change/"

    page = admin_client.get(url)
    form = page.context["adminform"].form
    response = admin_client.post(url, posted_as_shown(form))

    assert choices(form, "cfg__model")["retired-llm"] == "retired-llm (missing)"
    assert choices(form, "cfg__kbs")["archived-kb"] == "archived-kb (missing)"
    assert choices(form, "resource_policy__allowed_model_ids")["retired-llm"] == "retired-llm (missing)"
    assert choices(form, "resource_policy__allowed_tool_names")["old_tool"] == "old_tool (missing)"
    assert form["resource_policy__allowed_model_ids"].value() == ["chat", "retired-llm"]
    assert '<option value="retired-llm" selected>retired-llm (missing)</option>' in page.content.decode()
    assert response.status_code == 302, errors(response)
    binding.refresh_from_db()
    assert {name: getattr(binding, name) for name in ("runner_config", "resource_policy")} == stored


def test_an_id_unknown_to_the_workspace_is_refused_naming_the_field(admin_client, workspace, runner):
    give_resources(workspace)
    give_resources(WorkspaceFactory.create(slug="elsewhere"), prefix="elsewhere-")

    response = admin_client.post(
        ADD_URL,
        form_data(
            workspace,
            runner,
            cfg__model="embed",
            cfg__kbs=["elsewhere-handbook"],
            resource_policy__allowed_model_ids=["chat", "elsewhere-chat"],
            resource_policy__allowed_tool_names=["no_such_tool"],
        ),
    )

    found = errors(response)
    slug = workspace.slug
    assert found["cfg__model"] == [f"Model: there is no llm model embed in workspace {slug}."]
    assert found["cfg__kbs"] == [f"Knowledge bases: there is no knowledge base elsewhere-handbook in workspace {slug}."]
    assert found["resource_policy__allowed_model_ids"] == [
        f"Allowed models: there is no model elsewhere-chat in workspace {slug}."
    ]
    assert found["resource_policy__allowed_tool_names"] == [
        f"Allowed tools: there is no tool no_such_tool in workspace {slug}."
    ]
    assert not AgentBinding.objects.exists()


def test_a_policy_error_names_its_key_on_its_control(admin_client, workspace, runner):
    give_resources(workspace)

    response = admin_client.post(ADD_URL, form_data(workspace, runner, delivery_policy__max_message_size="0"))

    assert errors(response)["delivery_policy__max_message_size"] == [
        "delivery_policy.max_message_size: Input should be greater than or equal to 1"
    ]
    assert not AgentBinding.objects.exists()


def test_values_outside_the_controls_choices_round_trip_unchanged(admin_client, workspace, runner):
    give_resources(workspace)
    binding = binding_create(
        workspace=workspace,
        spec=BindingIn(
            binding_id="kept",
            event_types=["message.received"],
            runner_id=runner.runner_id,
            runner_config={"model": "chat"},
            resource_policy={
                "allowed_model_ids": ["*"],
                "platform_actions": ["message.send", "reaction.add"],
                "require_action_approval": False,
            },
            state_policy={"enable_state": False, "state_scopes": []},
            delivery_policy={"enable_streaming": False, "enable_reply": False, "max_message_size": 500},
        ),
    )
    before = {name: getattr(binding, name) for name in ("resource_policy", "state_policy", "delivery_policy")}
    url = f"/admin/bindings/agentbinding/{binding.pk}/change/"

    form = admin_client.get(url).context["adminform"].form
    response = admin_client.post(url, posted_as_shown(form))

    assert choices(form, "resource_policy__platform_actions")["reaction.add"] == (
        "reaction.add (not requested by the runner)"
    )
    assert response.status_code == 302, errors(response)
    binding.refresh_from_db()
    assert {name: getattr(binding, name) for name in ("resource_policy", "state_policy", "delivery_policy")} == before


def test_stored_policy_keys_without_a_control_are_shown_and_kept_not_dropped(admin_client, workspace, runner):
    give_resources(workspace)
    binding = AgentBindingFactory.create(
        workspace=workspace,
        binding_id="legacy",
        runner_id=runner.runner_id,
        runner_config={"model": "chat"},
        resource_policy={"allowed_model_ids": ["chat"], "legacy_quota": 5},
    )
    url = f"/admin/bindings/agentbinding/{binding.pk}/change/"

    page = admin_client.get(url)
    form = page.context["adminform"].form
    refused = admin_client.post(url, posted_as_shown(form))
    binding.refresh_from_db()
    kept = dict(binding.resource_policy)
    repaired = admin_client.post(url, {**posted_as_shown(form), "resource_policy__other": "{}"})

    assert json.loads(form["resource_policy__other"].value()) == {"legacy_quota": 5}
    assert 'name="resource_policy__other"' in page.content.decode()
    assert not form.fields["resource_policy__other"].widget.is_hidden
    assert errors(refused)["resource_policy__other"] == ["resource_policy.legacy_quota: Unknown field."]
    assert kept == {"allowed_model_ids": ["chat"], "legacy_quota": 5}
    assert repaired.status_code == 302, errors(repaired)
    binding.refresh_from_db()
    assert binding.resource_policy["allowed_model_ids"] == ["chat"]
    assert "legacy_quota" not in binding.resource_policy


def test_without_a_resource_catalog_the_selectors_are_free_text(admin_client, workspace, runner, monkeypatch):
    monkeypatch.setattr(resource_catalog, "_sources", {})

    page = admin_client.get(f"{ADD_URL}?workspace={workspace.pk}&runner_id={runner.runner_id}")
    response = admin_client.post(
        ADD_URL,
        form_data(
            workspace,
            runner,
            cfg__model="any-llm",
            cfg__kbs="kb-one\nkb-two",
            resource_policy__allowed_model_ids="any-llm\n*",
            resource_policy__allowed_tool_names="",
            resource_policy__allowed_kb_ids="kb-one",
        ),
    )

    html = page.content.decode()
    assert '<input type="text" name="cfg__model"' in html
    assert '<textarea name="resource_policy__allowed_model_ids"' in html
    assert response.status_code == 302, errors(response)
    binding = AgentBinding.objects.get()
    assert binding.runner_config["model"] == "any-llm"
    assert binding.runner_config["kbs"] == ["kb-one", "kb-two"]
    assert binding.resource_policy["allowed_model_ids"] == ["any-llm", "*"]
    assert binding.resource_policy["allowed_tool_names"] == []
    assert binding.resource_policy["allowed_kb_ids"] == ["kb-one"]


def test_every_policy_control_edits_a_key_its_policy_knows():
    for policy, model in POLICY_MODELS.items():
        assert set(POLICY_CONTROLLED_KEYS[policy]) <= set(model.model_fields), policy
