"""`import_legacy_config` on LangBot pipelines using each external platform runner LangBot had: the
`ai.<runner>` block becomes a validated binding of the official plugin, every LangBot value copied as it was,
the fields LangBot did not write given the runner's defaults, and the secret fields kept as secrets; and the
imported binding's config answers against the fake platform (through the in-process runtime; the worker's
turns are in test_legacy_dify_n8n.py and test_<platform>_integration.py)."""

from __future__ import annotations

import pytest

from bindings.services import binding_runner_config_plain
from tests.external_runners.legacy import (
    COZE_BLOCK,
    DASHSCOPE_DEFAULT_CONFIG_BLOCK,
    DASHSCOPE_FORM_BLOCK,
    DIFY_BLOCK,
    LANGFLOW_BLOCK,
    N8N_BLOCK,
    TBOX_BLOCK,
    import_legacy_pipeline,
    imported_answer,
)
from tests.external_runners.runs import reply
from tests.fakes import coze_server, dashscope_server, langflow_server, tbox_server

pytestmark = pytest.mark.django_db

COZE_REQUIRED_ONLY = {"api-key": "pat_x1", "bot-id": "1"}
DASHSCOPE_DEFAULTS = {"base-url": "https://dashscope.aliyuncs.com/api/v1", "timeout": 120}


@pytest.mark.parametrize(
    ("runner", "plugin", "block", "config", "secrets"),
    [
        pytest.param(
            "dify-service-api", "dify-agent", DIFY_BLOCK, {**DIFY_BLOCK, "remove-think": False}, {"api-key"}, id="dify"
        ),
        pytest.param(
            "n8n-service-api",
            "n8n-agent",
            N8N_BLOCK,
            N8N_BLOCK,
            {"basic-password", "jwt-secret", "header-value"},
            id="n8n",
        ),
        pytest.param("coze-api", "coze-agent", COZE_BLOCK, COZE_BLOCK, {"api-key"}, id="coze"),
        pytest.param(
            "coze-api",
            "coze-agent",
            COZE_REQUIRED_ONLY,
            {**COZE_REQUIRED_ONLY, "api-base": "https://api.coze.cn", "auto-save-history": True, "timeout": 120},
            {"api-key"},
            id="coze-required-fields-only",
        ),
        pytest.param(
            "dashscope-app-api",
            "dashscope-agent",
            DASHSCOPE_FORM_BLOCK,
            {**DASHSCOPE_FORM_BLOCK, **DASHSCOPE_DEFAULTS},
            {"api-key"},
            id="dashscope-form",
        ),
        pytest.param(
            "dashscope-app-api",
            "dashscope-agent",
            DASHSCOPE_DEFAULT_CONFIG_BLOCK,
            {**DASHSCOPE_DEFAULT_CONFIG_BLOCK, "references_quote": "参考资料来自:", **DASHSCOPE_DEFAULTS},
            {"api-key"},
            id="dashscope-default-config",
        ),
        pytest.param(
            "langflow-api",
            "langflow-agent",
            LANGFLOW_BLOCK,
            {**LANGFLOW_BLOCK, "timeout": 120},
            {"api-key"},
            id="langflow",
        ),
        pytest.param(
            "tbox-app-api",
            "tbox-agent",
            TBOX_BLOCK,
            {**TBOX_BLOCK, "base-url": "https://api.tbox.cn", "timeout": 120},
            {"api-key"},
            id="tbox",
        ),
    ],
)
def test_a_langbot_block_imports_as_a_validated_binding_copied_value_for_value(
    tmp_path, workspace, installed_runners, runner, plugin, block, config, secrets
):
    binding = import_legacy_pipeline(tmp_path, workspace.slug, runner, block, name=f"{runner} pipeline")

    assert binding.runner_id == f"plugin:langbot/{plugin}/default"
    assert binding.config_validated is True, binding.source_detail
    assert binding_runner_config_plain(binding) == config
    assert binding.runner_secrets == {key: config[key] for key in secrets}


def test_the_imported_binding_answers_against_coze(tmp_path, workspace, installed_runners, coze):
    coze.stream(coze_server.chat_events("Imported ", "and answering"))
    block = {**COZE_BLOCK, "api-key": coze_server.TOKEN, "api-base": coze.base_url}

    results = imported_answer(tmp_path, workspace.slug, "coze-api", block)

    assert reply(results) == "Imported and answering"
    assert coze.requests[0]["bot_id"] == coze_server.BOT_ID


def test_the_imported_binding_answers_against_dashscope(tmp_path, workspace, installed_runners, dashscope):
    dashscope.answer("Imported<ref>[1]</ref>", references=[dashscope_server.reference("1", "guide.md")])
    block = {
        **DASHSCOPE_DEFAULT_CONFIG_BLOCK,
        "app-type": "agent",
        "api-key": dashscope_server.API_KEY,
        "app-id": dashscope_server.APP_ID,
        "references-quote": "Source:",
        "base-url": dashscope.base_url,
    }

    results = imported_answer(tmp_path, workspace.slug, "dashscope-app-api", block)

    assert reply(results) == "Imported(Source: guide.md)"


def test_the_imported_binding_answers_against_langflow(tmp_path, workspace, installed_runners, langflow):
    langflow.reply("Imported and answering", tokens=("Imported ", "and answering"))
    block = {
        **LANGFLOW_BLOCK,
        "base-url": langflow.base_url,
        "api-key": langflow_server.API_KEY,
        "flow-id": langflow_server.FLOW_ID,
        "tweaks": '{"ChatInput-xyz": {"should_store_message": true}}',
    }

    results = imported_answer(tmp_path, workspace.slug, "langflow-api", block)

    assert reply(results) == "Imported and answering"
    # LangBot stored `tweaks` as JSON text; the flow gets the object
    assert langflow.requests[0]["tweaks"] == {"ChatInput-xyz": {"should_store_message": True}}


def test_the_imported_binding_answers_against_tbox(tmp_path, workspace, installed_runners, tbox):
    tbox.answer("Imported ", "and answering")
    block = {"api-key": tbox_server.TOKEN, "app-id": tbox_server.APP_ID, "base-url": tbox.base_url}

    results = imported_answer(tmp_path, workspace.slug, "tbox-app-api", block)

    assert reply(results) == "Imported and answering"
