"""`import_legacy_config`: a LangBot pipeline config becomes a binding, its runner block copied losslessly.
Most tests import for a runner that is not installed (`--allow-missing-runner`); without it such an import
is refused (tests/external_runners/test_legacy_migration.py)."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.management import CommandError, call_command

from bindings.legacy import LEGACY_RUNNER_IDS
from bindings.models import AgentBinding
from bindings.services import binding_runner_config_plain
from foundation.crypto import SECRET_MASK
from tests.factories import BotFactory, RunnerDescriptorFactory

pytestmark = pytest.mark.django_db

DIFY_BLOCK = {
    "base-url": "https://dify.example/v1",
    "app-type": "chat",
    "api-key": "app-ÄÖÜ-秘密-🔑",
    "thinking-convert": "plain",
    "timeout": 30,
    "temperature": 0.7,
    "big": 12345678901234567,
    "ratio": 1e-7,
    "flags": [True, False, None],
    "nested": {"deep": {"list": [1, 2.5, "три", {"k": []}], "empty": {}}, "zero": 0},
    "greeting": "你好,世界",
}


def pipeline(runner: str, block: dict) -> dict:
    return {
        "name": "Old pipeline",
        "config": {
            "trigger": {"group-respond-rules": {"at": True}},
            "ai": {"runner": {"runner": runner}, runner: block, "local-agent": {"model": "unused"}},
            "output": {"force-delay": {"min": 0, "max": 0}},
        },
    }


def write(tmp_path, data, suffix=".json"):
    path = tmp_path / f"pipeline{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_the_runner_block_is_copied_losslessly(tmp_path, workspace, suffix):
    path = write(tmp_path, pipeline("dify-service-api", DIFY_BLOCK), suffix)

    call_command("import_legacy_config", "--allow-missing-runner", str(path), "--workspace", workspace.slug)

    binding = AgentBinding.objects.get()
    assert binding_runner_config_plain(binding) == DIFY_BLOCK
    assert binding.runner_id == "plugin:langbot/dify-agent/default"
    assert binding.event_types == ["message.received"]
    assert (binding.scope_type, binding.scope_id) == ("workspace", workspace.slug)
    assert binding.name == "Old pipeline"


def test_without_the_runner_installed_the_config_is_stored_unchecked_and_says_so(tmp_path, workspace, capsys):
    path = write(tmp_path, pipeline("dify-service-api", DIFY_BLOCK))

    call_command("import_legacy_config", "--allow-missing-runner", str(path), "--workspace", workspace.slug)

    binding = AgentBinding.objects.get()
    assert binding.config_validated is False
    assert binding.source == AgentBinding.Source.LEGACY_IMPORT
    assert json.loads(binding.source_detail)["reason"] == "runner not installed at import time"
    assert "stored unchecked" in capsys.readouterr().out


def test_credential_looking_keys_are_encrypted_and_masked_even_without_a_schema(tmp_path, workspace, api_client):
    call_command(
        "import_legacy_config",
        "--allow-missing-runner",
        str(write(tmp_path, pipeline("dify-service-api", DIFY_BLOCK))),
        "--workspace",
        workspace.slug,
    )

    binding = AgentBinding.objects.get()
    shown = api_client.get(f"/api/v1/bindings/{binding.binding_id}").json()

    assert "api-key" in binding.runner_secrets
    assert "api-key" not in binding.runner_config
    assert shown["runner_config"]["api-key"] == SECRET_MASK
    assert shown["config_validated"] is False


@pytest.mark.parametrize(("legacy", "runner_id"), sorted(LEGACY_RUNNER_IDS.items()))
def test_every_legacy_runner_maps_to_its_official_plugin(tmp_path, workspace, legacy, runner_id):
    call_command(
        "import_legacy_config",
        "--allow-missing-runner",
        str(write(tmp_path, pipeline(legacy, {"x": 1}))),
        "--workspace",
        workspace.slug,
    )

    assert AgentBinding.objects.get().runner_id == runner_id


def test_an_unknown_runner_is_a_clear_error_and_writes_nothing(tmp_path, workspace):
    path = write(tmp_path, pipeline("my-own-runner", {"x": 1}))

    with pytest.raises(CommandError, match=r"unknown runner 'my-own-runner'.*nothing was written"):
        call_command("import_legacy_config", "--allow-missing-runner", str(path), "--workspace", workspace.slug)

    assert not AgentBinding.objects.exists()


def test_a_block_with_text_the_database_cannot_store_is_refused_by_path_and_writes_nothing(tmp_path, workspace):
    path = write(tmp_path, pipeline("dify-service-api", {"nested": {"api-key": "app-\x00"}}))

    with pytest.raises(CommandError, match=r"`ai\.dify-service-api\.nested\.api-key` holds a NUL.*nothing was written"):
        call_command("import_legacy_config", "--allow-missing-runner", str(path), "--workspace", workspace.slug)

    assert not AgentBinding.objects.exists()


def test_a_dry_run_writes_nothing(tmp_path, capsys):
    path = write(tmp_path, pipeline("coze-api", {"api-key": "k"}))

    call_command("import_legacy_config", "--allow-missing-runner", str(path), "--workspace", "fresh", "--dry-run")

    assert "would create binding" in capsys.readouterr().out
    assert not AgentBinding.objects.exists()
    from bindings.models import Workspace

    assert not Workspace.objects.filter(slug="fresh").exists()


def test_bot_option_scopes_the_binding_to_that_bot(tmp_path, workspace):
    BotFactory.create(workspace=workspace, bot_id="tg")

    call_command(
        "import_legacy_config",
        "--allow-missing-runner",
        str(write(tmp_path, pipeline("n8n-service-api", {"url": "u"}))),
        "--workspace",
        workspace.slug,
        "--bot",
        "tg",
    )

    binding = AgentBinding.objects.get()
    assert (binding.scope_type, binding.scope_id) == ("bot", "tg")


def test_an_unknown_bot_is_refused(tmp_path, workspace):
    with pytest.raises(CommandError, match="no bot 'ghost'"):
        call_command(
            "import_legacy_config",
            "--allow-missing-runner",
            str(write(tmp_path, pipeline("n8n-service-api", {}))),
            "--workspace",
            workspace.slug,
            "--bot",
            "ghost",
        )

    assert not AgentBinding.objects.exists()


def test_with_the_runner_installed_the_config_is_validated(tmp_path, workspace):
    RunnerDescriptorFactory.create(
        plugin_author="langbot",
        plugin_name="coze-agent",
        runner_name="default",
        config_schema=[{"name": "api-key", "label": "Key", "type": "secret", "required": True}],
    )
    good = write(tmp_path, pipeline("coze-api", {"api-key": "k"}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(pipeline("coze-api", {"api-key": "k", "bot-id": 7})))

    with pytest.raises(CommandError, match=r"runner_config\.bot-id"):
        call_command("import_legacy_config", "--allow-missing-runner", str(bad), "--workspace", workspace.slug)
    call_command("import_legacy_config", "--allow-missing-runner", str(good), "--workspace", workspace.slug)

    binding = AgentBinding.objects.get()
    assert binding.config_validated is True
    assert binding.runner_secrets == {"api-key": "k"}


def test_a_file_that_is_not_a_pipeline_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"hello": "world"}')

    with pytest.raises(CommandError, match="no `ai` section"):
        call_command("import_legacy_config", "--allow-missing-runner", str(path))


def test_a_later_edit_with_the_runner_installed_validates_the_imported_config(tmp_path, workspace, api_client):
    call_command(
        "import_legacy_config",
        "--allow-missing-runner",
        str(write(tmp_path, pipeline("coze-api", {"api-key": "k", "x": 1}))),
        "--workspace",
        workspace.slug,
    )
    binding = AgentBinding.objects.get()
    RunnerDescriptorFactory.create(
        plugin_author="langbot",
        plugin_name="coze-agent",
        runner_name="default",
        config_schema=[
            {"name": "api-key", "label": "Key", "type": "secret", "required": True},
            {"name": "x", "label": "X", "type": "integer"},
        ],
    )
    shown = api_client.get(f"/api/v1/bindings/{binding.binding_id}").json()

    response = api_client.patch(
        f"/api/v1/bindings/{binding.binding_id}", {"runner_config": shown["runner_config"]}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json()["config_validated"] is True
    assert binding_runner_config_plain(AgentBinding.objects.get()) == {"api-key": "k", "x": 1}
