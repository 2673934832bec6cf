"""Plugin and runner manifests: YAML as plugin authors write it loads, and becomes the wire manifest."""

import textwrap

import pytest
import yaml
from pydantic import ValidationError

from langbot_sdk.protocol import (
    AgentRunnerComponentManifest,
    AgentRunnerManifest,
    DynamicFormItemSchema,
    DynamicFormItemType,
    I18nObject,
    ListAgentRunnersResponse,
    PluginLoadReport,
    PluginManifest,
    manifest_unknown_fields,
)

PLUGIN_YAML = """
apiVersion: langbot/v1
kind: Plugin
metadata:
  author: langbot
  name: dify-agent
  version: 0.1.0
  label:
    en_US: Dify Agent
    zh_Hans: Dify 智能体
  description: Run a Dify application.
  repository: https://example.invalid/dify-agent
spec:
  components:
    AgentRunner:
      fromDirs:
        - path: components/agent_runner/
"""

# A runner component as official plugins write it (docs/packaging.md), including the keys this protocol does not know.
RUNNER_YAML = """
apiVersion: langbot/v1
kind: AgentRunner
metadata:
  name: default
  label:
    en_US: Dify Agent
    zh_Hans: Dify Agent
  description:
    en_US: Run a Dify application as a LangBot AgentRunner.
    zh_Hans: 将 Dify 应用作为 LangBot AgentRunner 运行。
spec:
  config: []
  capabilities:
    streaming: true
    tool_calling: false
    knowledge_retrieval: false
    multimodal_input: false
    event_context: true
    platform_api: false
    interrupt: false
    stateful_session: true
    host_state: optional
  permissions:
    models: []
    tools: []
    knowledge_bases: []
    storage: ["plugin"]
    files: []
    platform_api: []
execution:
  python:
    path: ./main.py
    attr: DefaultAgentRunner
"""


def load(text):
    return yaml.safe_load(textwrap.dedent(text))


def test_official_runner_example_with_unknown_keys_loads_and_reports_them():
    runner = AgentRunnerComponentManifest.model_validate(load(RUNNER_YAML))

    assert runner.spec.capabilities.streaming is True
    assert runner.spec.permissions.storage == ["plugin"]
    assert runner.ignored_fields == ["spec.capabilities.host_state", "spec.permissions.files"]


def test_unknown_fields_are_found_inside_lists_and_at_the_top():
    raw = load(RUNNER_YAML)
    raw["x-owner"] = "team-a"
    raw["spec"]["config"] = [{"name": "api_key", "type": "secret", "label": "API key", "show_if": {}}]

    ignored = manifest_unknown_fields(AgentRunnerComponentManifest, raw)

    assert "x-owner" in ignored
    assert "spec.config[0].show_if" in ignored
    assert AgentRunnerComponentManifest.model_validate(raw).spec.config[0].name == "api_key"


def test_known_manifest_keys_are_still_validated():
    raw = load(RUNNER_YAML)
    raw["spec"]["permissions"]["models"] = ["invoke", "train"]

    with pytest.raises(ValidationError, match="train"):
        AgentRunnerComponentManifest.model_validate(raw)


def test_runner_manifest_without_execution_is_refused():
    raw = load(RUNNER_YAML)
    del raw["execution"]

    with pytest.raises(ValidationError, match="execution"):
        AgentRunnerComponentManifest.model_validate(raw)


def test_plugin_manifest_loads_with_string_description_and_optional_execution():
    plugin = PluginManifest.model_validate(load(PLUGIN_YAML))

    assert plugin.identity == "langbot/dify-agent"
    assert plugin.execution is None
    assert plugin.metadata.description is not None
    assert plugin.metadata.description.root == {"en_US": "Run a Dify application."}
    assert plugin.spec.components.agent_runner is not None
    assert [d.path for d in plugin.spec.components.agent_runner.from_dirs] == ["components/agent_runner/"]
    assert plugin.ignored_fields == []


def test_plugin_version_written_as_a_yaml_number_is_read_as_text():
    raw = load(PLUGIN_YAML)
    raw["metadata"]["version"] = 1.0

    assert PluginManifest.model_validate(raw).metadata.version == "1.0"


@pytest.mark.parametrize(
    ("field", "value"), [("author", "lang bot"), ("name", "dify/agent"), ("name", ""), ("author", "..")]
)
def test_plugin_with_a_name_unusable_in_runner_ids_is_refused(field, value):
    raw = load(PLUGIN_YAML)
    raw["metadata"][field] = value

    with pytest.raises(ValidationError, match=field if value else "empty"):
        PluginManifest.model_validate(raw)


def test_plugin_manifest_of_another_kind_is_refused():
    raw = load(PLUGIN_YAML)
    raw["kind"] = "AgentRunner"

    with pytest.raises(ValidationError, match="kind"):
        PluginManifest.model_validate(raw)


def test_component_becomes_the_wire_manifest_with_id_and_plugin_info():
    plugin = PluginManifest.model_validate(load(PLUGIN_YAML))
    runner = AgentRunnerComponentManifest.model_validate(load(RUNNER_YAML))

    manifest = runner.to_runner_manifest(plugin)

    assert manifest.id == "plugin:langbot/dify-agent/default"
    assert manifest.name == "default"
    assert manifest.label.text("zh_Hans") == "Dify Agent"
    assert manifest.capabilities.stateful_session is True
    assert manifest.metadata["plugin"] == {
        "author": "langbot",
        "name": "dify-agent",
        "version": "0.1.0",
        "label": {"en_US": "Dify Agent", "zh_Hans": "Dify 智能体"},
        "description": {"en_US": "Run a Dify application."},
    }
    assert AgentRunnerManifest.model_validate_json(manifest.model_dump_json()) == manifest


def test_label_may_be_a_plain_string_or_a_locale_map():
    from_string = I18nObject.model_validate("QA Runner")
    from_map = I18nObject.model_validate({"zh_Hans": "QA 测试", "en_US": "QA Runner"})

    assert from_string.root == {"en_US": "QA Runner"}
    assert from_string.text("zh_Hans") == "QA Runner"
    assert from_map.text("zh_Hans") == "QA 测试"
    assert from_map.text("ja_JP") == "QA Runner"


def test_label_in_a_locale_other_than_english_falls_back_to_what_exists():
    assert I18nObject({"zh_Hans": "仅中文"}).text() == "仅中文"


def test_empty_label_map_is_refused():
    with pytest.raises(ValidationError, match="at least one locale"):
        I18nObject.model_validate({})


@pytest.mark.parametrize(
    ("alias", "expected_type", "implied"),
    [
        ("llm-model-selector", DynamicFormItemType.MODEL_SELECTOR, {"model_kind": "llm"}),
        ("rerank-model-selector", DynamicFormItemType.MODEL_SELECTOR, {"model_kind": "rerank"}),
        ("knowledge-base-multi-selector", DynamicFormItemType.KNOWLEDGE_BASE_SELECTOR, {"multiple": True}),
        ("array[string]", DynamicFormItemType.STRING, {"multiple": True}),
        ("float", DynamicFormItemType.NUMBER, {}),
        ("password", DynamicFormItemType.SECRET, {}),
    ],
)
def test_langbot_style_form_types_are_mapped(alias, expected_type, implied):
    item = DynamicFormItemSchema.model_validate({"name": "field", "label": "Field", "type": alias})

    assert item.type is expected_type
    for key, value in implied.items():
        assert getattr(item, key) == value


def test_unknown_form_type_is_refused_naming_the_accepted_ones():
    with pytest.raises(ValidationError, match=r"unknown config item type 'colour-picker'.*model-selector"):
        DynamicFormItemSchema.model_validate({"name": "c", "label": "C", "type": "colour-picker"})


def test_select_without_options_is_refused():
    with pytest.raises(ValidationError, match="without options"):
        DynamicFormItemSchema.model_validate({"name": "mode", "label": "Mode", "type": "select"})


def test_duplicate_config_item_names_are_refused():
    raw = load(RUNNER_YAML)
    raw["spec"]["config"] = [
        {"name": "key", "label": "Key", "type": "string"},
        {"name": "key", "label": "Key again", "type": "secret"},
    ]

    with pytest.raises(ValidationError, match="appears twice"):
        AgentRunnerComponentManifest.model_validate(raw)


def test_wire_manifest_rejects_fields_it_does_not_know():
    plugin = PluginManifest.model_validate(load(PLUGIN_YAML))
    wire = AgentRunnerComponentManifest.model_validate(load(RUNNER_YAML)).to_runner_manifest(plugin)
    raw = wire.model_dump(mode="json")
    raw["capabilities"]["telepathy"] = True

    with pytest.raises(ValidationError, match="telepathy"):
        AgentRunnerManifest.model_validate(raw)


def test_runner_list_reports_a_broken_plugin_beside_the_loaded_ones():
    response = ListAgentRunnersResponse.model_validate(
        {
            "runners": [],
            "plugins": [
                {"path": "plugins/broken", "status": "error", "error": "manifest.yaml: kind: missing"},
                {
                    "path": "plugins/qa-runner",
                    "author": "langbot",
                    "name": "qa-runner",
                    "version": "0.1.0",
                    "status": "loaded",
                    "runner_ids": ["plugin:langbot/qa-runner/default"],
                },
            ],
        }
    )

    assert [p.status for p in response.plugins] == ["error", "loaded"]
    assert response.plugins[0] == PluginLoadReport(
        path="plugins/broken", status="error", error="manifest.yaml: kind: missing"
    )
