"""Admin: every official runner's config form renders from its manifest schema with the control each item
type calls for (masked secrets, selects with their options, checkboxes, numbers, JSON and prompt
textareas, resource selects), never puts a secret in the page, and saves a valid config validated."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bs4 import BeautifulSoup, Tag
from django.test import Client

from bindings.forms import FALLBACK_MODEL_ITEMS, LANGBOT_KEPT_ITEMS
from bindings.models import AgentBinding, RunnerDescriptor
from bindings.runner_config import config_schema_items
from bindings.services import binding_runner_config_plain
from foundation.crypto import SECRET_MASK
from langbot_sdk.protocol import ListAgentRunnersResponse
from langbot_sdk.protocol.manifest import DynamicFormItemSchema, DynamicFormItemType
from langbot_sdk.runtime.loader import load_plugins
from resources.models import KnowledgeBase, Model
from runtimes.descriptors import runner_descriptors_sync
from tests.conftest import PLUGINS_DIR
from tests.factories import ModelFactory, ModelProviderFactory, UserFactory

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/bindings/agentbinding/add/"
OFFICIAL_PLUGINS = sorted(path.name for path in PLUGINS_DIR.iterdir() if (path / "manifest.yaml").is_file())
SECRET = "sk-never-in-the-page-0123456789"


@pytest.fixture(scope="module")
def official_report() -> ListAgentRunnersResponse:
    """What the plugin runtime reports for the official plugins (loaded in-process, as the runtime does)."""
    registry = load_plugins([PLUGINS_DIR])
    broken = [report for report in registry.reports if report.status != "loaded"]
    assert not broken, broken
    return ListAgentRunnersResponse(runners=registry.manifests, plugins=registry.reports)


@pytest.fixture
def official_runners(db, official_report) -> dict[str, RunnerDescriptor]:
    """The official runners' descriptors by plugin directory name, synced as `sync_runners` does."""
    runner_descriptors_sync(report=official_report)
    by_plugin = {descriptor.plugin_name: descriptor for descriptor in RunnerDescriptor.objects.all()}
    assert sorted(by_plugin) == OFFICIAL_PLUGINS
    return by_plugin


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def resources(workspace) -> dict[str, str]:
    """One model of each kind and one knowledge base in the workspace: what the selectors offer."""
    provider = ModelProviderFactory.create(workspace=workspace, provider_id="openai", name="OpenAI")
    for model_id, kind in (("chat", Model.Kind.LLM), ("embed", Model.Kind.EMBEDDING), ("rank", Model.Kind.RERANK)):
        ModelFactory.create(provider=provider, model_id=model_id, name=model_id, kind=kind)
    KnowledgeBase.objects.create(workspace=workspace, kb_id="handbook", name="Handbook")
    return {"llm": "chat", "embedding": "embed", "rerank": "rank", "kb": "handbook"}


def _items(descriptor: RunnerDescriptor) -> list[DynamicFormItemSchema]:
    return config_schema_items(descriptor.config_schema)


def _control(page: BeautifulSoup, item: DynamicFormItemSchema) -> Tag | None:
    controls = page.select(f'[name="cfg__{item.name}"]')
    if item.name in LANGBOT_KEPT_ITEMS:
        # LangBot's leftovers are shown only when a binding holds a value for them.
        assert controls == [], f"{item.name}: shown although it holds nothing"
        return None
    assert len(controls) == 1, f"{item.name}: {len(controls)} controls"
    return controls[0]


def _options(select: Tag) -> list[str]:
    return [str(option.get("value")) for option in select.find_all("option")]


def _selected(select: Tag) -> list[str]:
    return [str(option.get("value")) for option in select.find_all("option") if option.has_attr("selected")]


def _assert_renders(control: Tag, item: DynamicFormItemSchema, resources: dict[str, str]) -> None:
    """`control` is the control `item`'s type calls for, showing the schema's default."""
    kind, default = item.type, item.default
    where = f"{item.name} ({kind.value})"
    if kind is DynamicFormItemType.SECRET:
        assert (control.name, control.get("type")) == ("input", "password"), where
        assert control.get("value") in (None, ""), where
    elif kind is DynamicFormItemType.SELECT:
        assert control.name == "select", where
        assert [value for value in _options(control) if value] == [option.name for option in item.options], where
        assert _selected(control) == [default or ""], where
    elif kind is DynamicFormItemType.BOOLEAN:
        assert (control.name, control.get("type")) == ("input", "checkbox"), where
        assert control.has_attr("checked") is bool(default), where
    elif kind in (DynamicFormItemType.INTEGER, DynamicFormItemType.NUMBER):
        assert (control.name, control.get("type")) == ("input", "number"), where
        assert control.get("step") == (None if kind is DynamicFormItemType.INTEGER else "any"), where
        if default is not None:
            assert float(str(control.get("value"))) == default, where
    elif kind in (DynamicFormItemType.JSON, DynamicFormItemType.PROMPT_EDITOR):
        assert control.name == "textarea", where
        shown = json.loads(control.get_text().strip() or "null")
        assert shown == default, where
        # A JSON item shows a JSON value to edit, not JSON text quoted as a string.
        assert kind is DynamicFormItemType.PROMPT_EDITOR or not isinstance(shown, str), where
    elif kind is DynamicFormItemType.TEXT:
        assert control.name == "textarea", where
        assert control.get_text().strip() == (default or ""), where
    elif kind in (DynamicFormItemType.MODEL_SELECTOR, DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR):
        assert control.name == "select", where
        assert control.has_attr("multiple") is item.multiple, where
        offered = (
            resources["kb"]
            if kind is DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR
            else resources[item.model_kind or "llm"]
        )
        assert offered in _options(control), where
    elif item.multiple:
        # A list of strings is a line list: one value per line, never JSON to type.
        assert kind is DynamicFormItemType.STRING, where
        assert control.name == "textarea", where
        assert control.get_text().strip().splitlines() == (default or []), where
    else:
        assert kind is DynamicFormItemType.STRING, where
        assert (control.name, control.get("type")) == ("input", "text"), where
        assert (control.get("value") or "") == (default or ""), where


def _valid_value(item: DynamicFormItemSchema, resources: dict[str, str]) -> Any:
    """A value the admin would post for `item` that the schema accepts (None: leave the control empty)."""
    kind = item.type
    if kind is DynamicFormItemType.SECRET:
        return SECRET
    if kind is DynamicFormItemType.SELECT:
        return item.default or item.options[-1].name
    if kind is DynamicFormItemType.BOOLEAN:
        return "on" if item.default else None
    if kind in (DynamicFormItemType.INTEGER, DynamicFormItemType.NUMBER):
        return str(item.default if item.default is not None else 3)
    if kind in (DynamicFormItemType.JSON, DynamicFormItemType.PROMPT_EDITOR):
        return json.dumps(item.default) if item.default is not None else None
    if item.name in FALLBACK_MODEL_ITEMS:
        return None  # the one llm model is the primary, which may not be its own fallback
    if kind is DynamicFormItemType.MODEL_SELECTOR:
        chosen = resources[item.model_kind or "llm"]
        return [chosen] if item.multiple else chosen
    if kind is DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR:
        return [resources["kb"]] if item.multiple else resources["kb"]
    if item.required or item.default:
        return str(item.default or f"value-of-{item.name}")
    return None


def _form_data(workspace, descriptor: RunnerDescriptor, resources: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "binding_id": f"official-{descriptor.plugin_name}",
        "name": descriptor.label_text(),
        "workspace": str(workspace.pk),
        "enabled": "on",
        "scope_type": "workspace",
        "scope_id": "",
        "event_types": "message.received",
        "priority": "0",
        "runner_id": descriptor.runner_id,
        "resource_policy__allowed_model_ids": ["*"],
        "resource_policy__allowed_tool_names": ["*"],
        "resource_policy__allowed_kb_ids": ["*"],
        "resource_policy__storage_areas": ["plugin", "binding"],
        "state_policy__enable_state": "on",
        "state_policy__state_scopes": ["conversation"],
        "delivery_policy__enable_streaming": "on",
        "delivery_policy__enable_reply": "on",
        "trigger_policy__chat_types": ["private", "group"],
        "trigger_policy__group_mention": "on",
        "trigger_policy__strip_prefix": "on",
        "trigger_policy__access_mode": "deny",
        "concurrency_policy": "queue",
        "timeout_seconds": "300",
        "_save": "Save",
    }
    for item in _items(descriptor):
        value = _valid_value(item, resources)
        if value is not None:
            data[f"cfg__{item.name}"] = value
    return data


def _errors(response) -> dict[str, Any]:
    context = getattr(response, "context", None)
    return dict(context["adminform"].form.errors) if context else {}


def _secret_items(descriptor: RunnerDescriptor) -> list[DynamicFormItemSchema]:
    return [item for item in _items(descriptor) if item.type is DynamicFormItemType.SECRET]


@pytest.mark.parametrize("plugin", OFFICIAL_PLUGINS)
def test_the_add_form_renders_each_config_item_as_its_control(
    admin_client, official_runners, workspace, resources, plugin
):
    descriptor = official_runners[plugin]

    response = admin_client.get(ADD_URL, {"runner_id": descriptor.runner_id, "workspace": workspace.pk})

    assert response.status_code == 200
    page = BeautifulSoup(response.content, "html.parser")
    for item in _items(descriptor):
        control = _control(page, item)
        if control is not None:
            _assert_renders(control, item, resources)


@pytest.mark.parametrize("plugin", OFFICIAL_PLUGINS)
def test_a_valid_config_saves_validated_and_its_secrets_never_reach_the_page(
    admin_client, official_runners, workspace, resources, plugin
):
    descriptor = official_runners[plugin]
    data = _form_data(workspace, descriptor, resources)

    created = admin_client.post(ADD_URL, data)
    binding = AgentBinding.objects.get(binding_id=data["binding_id"])
    change_url = f"/admin/bindings/agentbinding/{binding.pk}/change/"
    page = admin_client.get(change_url)
    kept = admin_client.post(change_url, {**data, **{f"cfg__{i.name}": SECRET_MASK for i in _secret_items(descriptor)}})

    assert created.status_code == 302, _errors(created)
    assert binding.config_validated is True
    stored = binding_runner_config_plain(binding)
    assert {item.name for item in _items(descriptor) if item.required} <= set(stored)
    html = page.content.decode()
    assert SECRET not in html
    soup = BeautifulSoup(html, "html.parser")
    for item in _secret_items(descriptor):
        assert stored[item.name] == SECRET
        assert item.name not in binding.runner_config
        assert item.name in binding.runner_secrets
        control = _control(soup, item)
        assert control is not None
        assert control.get("value") == SECRET_MASK
    assert kept.status_code == 302, _errors(kept)
    assert binding_runner_config_plain(AgentBinding.objects.get(pk=binding.pk)) == stored


@pytest.mark.parametrize("plugin", [p for p in OFFICIAL_PLUGINS if p != "qa-runner"])
def test_a_refused_form_does_not_echo_a_typed_secret(admin_client, official_runners, workspace, resources, plugin):
    descriptor = official_runners[plugin]
    data = {**_form_data(workspace, descriptor, resources), "timeout_seconds": "not a number"}

    response = admin_client.post(ADD_URL, data)

    assert response.status_code == 200
    assert "timeout_seconds" in _errors(response)
    assert SECRET not in response.content.decode()


@pytest.mark.parametrize(
    ("plugin", "item_name"),
    [("harness-agent", "skills"), ("langflow-agent", "tweaks"), ("qa-runner", "proxy_calls")],
)
def test_invalid_json_is_refused_on_its_field_naming_it(
    admin_client, official_runners, workspace, resources, plugin, item_name
):
    descriptor = official_runners[plugin]
    label = next(item for item in _items(descriptor) if item.name == item_name).label
    data = {**_form_data(workspace, descriptor, resources), f"cfg__{item_name}": "{not json"}

    response = admin_client.post(ADD_URL, data)

    errors = _errors(response)
    assert list(errors) == [f"cfg__{item_name}"]
    assert str(label.root["en_US"] if isinstance(label.root, dict) else label.root) in errors[f"cfg__{item_name}"][0]
    assert not AgentBinding.objects.exists()


def test_the_harness_environment_with_its_api_key_is_stored_encrypted_and_shown_masked(
    admin_client, official_runners, workspace, resources, api_client
):
    descriptor = official_runners["harness-agent"]
    env = {"ANTHROPIC_API_KEY": SECRET}
    data = {**_form_data(workspace, descriptor, resources), "cfg__env": json.dumps(env)}

    created = admin_client.post(ADD_URL, data)
    binding = AgentBinding.objects.get(binding_id=data["binding_id"])
    page = admin_client.get(f"/admin/bindings/agentbinding/{binding.pk}/change/")
    listed = api_client.get(f"/api/v1/bindings/{binding.binding_id}")

    assert created.status_code == 302, _errors(created)
    assert json.loads(binding_runner_config_plain(binding)["env"]) == env
    assert "env" not in binding.runner_config
    assert SECRET not in page.content.decode()
    assert listed.json()["runner_config"]["env"] == SECRET_MASK


@pytest.mark.parametrize(("plugin", "item_name"), [("harness-agent", "args"), ("local-agent", "tools")])
def test_a_list_of_strings_is_edited_one_per_line(
    admin_client, official_runners, workspace, resources, plugin, item_name
):
    descriptor = official_runners[plugin]
    data = {
        **_form_data(workspace, descriptor, resources),
        f"cfg__{item_name}": "--model\r\n  sonnet \r\n\r\nweb_search",
    }

    created = admin_client.post(ADD_URL, data)
    binding = AgentBinding.objects.get(binding_id=data["binding_id"])
    page = BeautifulSoup(admin_client.get(f"/admin/bindings/agentbinding/{binding.pk}/change/").content, "html.parser")

    assert created.status_code == 302, _errors(created)
    assert binding.runner_config[item_name] == ["--model", "sonnet", "web_search"]
    control = page.select_one(f'textarea[name="cfg__{item_name}"]')
    assert control is not None
    assert control.get_text().strip().splitlines() == ["--model", "sonnet", "web_search"]
