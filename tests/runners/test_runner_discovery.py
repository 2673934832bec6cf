"""Runner discovery through a real plugin runtime child: sync command, REST list/refresh, load errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.core.management import call_command

from bindings.models import RunnerDescriptor
from tests.conftest import PLUGINS_DIR

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

QA_RUNNER_ID = "plugin:langbot/qa-runner/default"


@pytest.fixture
def api_client(workspace):
    """A client with an operator-scoped key: refreshing the catalog is for operators (tests/security)."""
    from rest_framework.test import APIClient

    from bindings.services import api_key_create

    _, key = api_key_create(workspace=workspace, is_operator=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _plugin_with_import_error(root: Path) -> None:
    plugin = root / "broken-import"
    (plugin / "components" / "agent_runner").mkdir(parents=True)
    (plugin / "manifest.yaml").write_text(
        "apiVersion: langbot/v1\nkind: Plugin\n"
        "metadata: {author: acme, name: broken-import, version: 0.1.0, label: Broken}\n"
        "spec:\n  components:\n    AgentRunner:\n      fromDirs: [{path: components/agent_runner/}]\n"
    )
    (plugin / "components" / "agent_runner" / "default.yaml").write_text(
        "apiVersion: langbot/v1\nkind: AgentRunner\nmetadata: {name: default, label: Broken}\n"
        "spec: {}\nexecution:\n  python: {path: ./default.py, attr: Runner}\n"
    )
    (plugin / "components" / "agent_runner" / "default.py").write_text("import not_a_module_anywhere\n")


def _plugin_with_bad_manifest(root: Path) -> None:
    plugin = root / "bad-manifest"
    plugin.mkdir()
    (plugin / "manifest.yaml").write_text("apiVersion: langbot/v1\nkind: Plugin\nmetadata: [not, a, mapping]\n")


def test_sync_runners_lists_the_qa_runner_with_its_manifest(runtime_plugins, capsys):
    runtime_plugins(PLUGINS_DIR)

    call_command("sync_runners")

    assert QA_RUNNER_ID in capsys.readouterr().out
    runner = RunnerDescriptor.objects.get(runner_id=QA_RUNNER_ID)
    assert runner.status == RunnerDescriptor.Status.AVAILABLE
    assert (runner.plugin_author, runner.plugin_name, runner.runner_name) == ("langbot", "qa-runner", "default")
    assert runner.capabilities["streaming"] is True
    assert any(item["name"] == "behaviour" for item in runner.config_schema)
    assert len(runner.manifest_sha256) == 64


def test_refresh_api_reports_broken_plugins_and_still_loads_the_good_one(runtime_plugins, tmp_path, api_client):
    shutil.copytree(PLUGINS_DIR / "qa-runner", tmp_path / "qa-runner")
    _plugin_with_import_error(tmp_path)
    _plugin_with_bad_manifest(tmp_path)
    runtime_plugins(tmp_path)

    response = api_client.post("/api/v1/runners/refresh")

    assert response.status_code == 200
    by_id = {item["runner_id"]: item for item in response.json()["items"]}
    assert by_id[QA_RUNNER_ID]["status"] == "available"
    broken = by_id["plugin:acme/broken-import/default"]
    assert broken["status"] == "error"
    assert "not_a_module_anywhere" in broken["load_error"]
    assert any("bad-manifest" in (error.get("path") or "") for error in response.json()["plugin_errors"])


def test_a_runner_that_disappears_is_marked_missing_not_deleted(runtime_plugins, tmp_path, api_client):
    shutil.copytree(PLUGINS_DIR / "qa-runner", tmp_path / "qa-runner")
    runtime_plugins(tmp_path)
    api_client.post("/api/v1/runners/refresh")
    shutil.rmtree(tmp_path / "qa-runner")
    runtime_plugins(tmp_path)

    response = api_client.post("/api/v1/runners/refresh")

    assert response.json()["missing"] == [QA_RUNNER_ID]
    listed = api_client.get("/api/v1/runners", {"status": "missing"}).json()["items"]
    assert [item["runner_id"] for item in listed] == [QA_RUNNER_ID]


def test_refresh_answers_503_with_a_code_when_the_runtime_is_unreachable(settings, runtime_plugins, api_client):
    runtime_plugins(PLUGINS_DIR)
    settings.LANGBOT_RUNTIME_URL = "ws://127.0.0.1:9"  # discard port: nothing listens

    response = api_client.post("/api/v1/runners/refresh")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "runtime.unavailable"


def test_runner_list_rejects_an_unknown_status_filter(api_client):
    response = api_client.get("/api/v1/runners", {"status": "sleeping"})

    assert response.status_code == 400
    assert "status" in response.json()["error"]["details"]["fields"]


def test_a_binding_stored_before_its_runner_was_known_is_validated_by_the_sync(runtime_plugins, capsys):
    from bindings.models import AgentBinding

    call_command("seed_demo")
    assert AgentBinding.objects.get(binding_id="demo-qa").config_validated is False
    runtime_plugins(PLUGINS_DIR)

    call_command("sync_runners")

    binding = AgentBinding.objects.get(binding_id="demo-qa")
    assert binding.config_validated is True
    # the runner's defaults were filled in next to the seeded choice
    assert binding.runner_config["behaviour"] == "ok"
    assert binding.runner_config["delta_count"] == 5
