"""A LangBot pipeline's `ai.local-agent` block imports onto the local-agent plugin without losing a value,
validates against the plugin's config form, and selects the models and knowledge bases the host then
authorizes for the run."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from bindings.models import AgentBinding
from bindings.services import binding_runner_config_plain
from langbot_sdk.runtime.loader import load_plugins
from runners.orchestrator.resources import config_selections
from tests.factories import RunnerDescriptorFactory
from tests.local_agent.plugin import PLUGIN_DIR, RUNNER_ID

pytestmark = pytest.mark.django_db

# LangBot's default local-agent block (templates/default-pipeline-config.json), with values filled in.
LANGBOT_BLOCK = {
    "model": {"primary": "m1", "fallbacks": ["m2"], "reasoning": {"m1": "high"}},
    "max-round": 10,
    "prompt": [{"role": "system", "content": "You are a helpful assistant. 你好"}],
    "knowledge-bases": ["kb1"],
    "box-session-id-template": "{launcher_type}_{launcher_id}",
    "rerank-model": "rr",
    "rerank-top-k": 5,
    "tools": ["weather"],
    "enable-all-tools": False,
}


def manifest():
    loaded = load_plugins([PLUGIN_DIR.parent])
    return next(m for m in loaded.manifests if m.id == RUNNER_ID)


def test_a_langbot_local_agent_block_imports_losslessly_and_validates(tmp_path, workspace):
    schema = [item.model_dump(mode="json", exclude_none=True) for item in manifest().config_schema]
    RunnerDescriptorFactory.create(
        plugin_author="langbot", plugin_name="local-agent", runner_name="default", config_schema=schema
    )
    path = tmp_path / "pipeline.json"
    pipeline = {"name": "Agent", "config": {"ai": {"runner": {"runner": "local-agent"}, "local-agent": LANGBOT_BLOCK}}}
    path.write_text(json.dumps(pipeline, ensure_ascii=False), encoding="utf-8")

    call_command("import_legacy_config", str(path), "--workspace", workspace.slug)

    binding = AgentBinding.objects.get()
    assert binding.runner_id == RUNNER_ID
    assert binding.config_validated is True
    config = binding_runner_config_plain(binding)
    unchanged = {k: v for k, v in LANGBOT_BLOCK.items() if k != "model"}
    assert {k: config[k] for k in unchanged} == unchanged
    assert (config["model"], config["fallback-models"], config["model-reasoning"]) == ("m1", ["m2"], {"m1": "high"})


def test_the_imported_config_selects_its_models_and_knowledge_bases_for_the_host():
    from bindings.legacy import legacy_pipeline_parse

    pipeline = legacy_pipeline_parse({"ai": {"runner": {"runner": "local-agent"}, "local-agent": LANGBOT_BLOCK}})

    models, kbs = config_selections(manifest().config_schema, pipeline.runner_config)

    assert models == [("m1", "llm"), ("rr", "rerank"), ("m2", "llm")]
    assert kbs == ["kb1"]


def test_an_older_langbot_block_with_a_plain_model_id_and_one_knowledge_base_is_kept_as_it_is():
    from bindings.legacy import legacy_pipeline_parse

    old = {"model": "m1", "max-round": 10, "prompt": [{"role": "system", "content": "hi"}], "knowledge-base": "kb0"}

    pipeline = legacy_pipeline_parse({"ai": {"runner": {"runner": "local-agent"}, "local-agent": old}})

    assert pipeline.runner_config == old
    assert config_selections(manifest().config_schema, old)[1] == ["kb0"]
