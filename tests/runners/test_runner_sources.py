"""Runners served by more than one runtime: a runner id belongs to one source at a time, and a workspace's
development runners are seen, bound and run only in that workspace."""

from __future__ import annotations

from typing import Any

import pytest

from bindings.models import RunnerDescriptor
from bindings.services import BindingValidationError, binding_prepare
from bindings.specs import BindingIn
from langbot_sdk.protocol import AgentRunnerManifest, ListAgentRunnersResponse
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db

DEV_ID = "plugin:alice/weather/default"


def _manifest(runner_id: str) -> AgentRunnerManifest:
    author_plugin, _, runner = runner_id.removeprefix("plugin:").rpartition("/")
    author, plugin = author_plugin.split("/")
    return AgentRunnerManifest.model_validate(
        {
            "id": runner_id,
            "name": runner,
            "label": {"en_US": plugin},
            "metadata": {"plugin": {"author": author, "name": plugin, "version": "0.1.0"}, "runner": runner},
        }
    )


def _report(*runner_ids: str) -> ListAgentRunnersResponse:
    return ListAgentRunnersResponse(runners=[_manifest(r) for r in runner_ids], plugins=[])


def _dev_sync(workspace_id: int, key: str, *runner_ids: str) -> Any:
    return runner_descriptors_sync(
        report=_report(*runner_ids), source=RunnerDescriptor.Source.DEV, source_key=key, workspace_id=workspace_id
    )


def _spec(runner_id: str) -> BindingIn:
    return BindingIn.model_validate(
        {"name": "dev", "scope": {"scope_type": "workspace"}, "event_types": ["message.*"], "runner_id": runner_id}
    )


def test_a_development_runner_is_listed_and_bindable_only_in_its_workspace(api_client_for):
    mine, theirs = WorkspaceFactory.create(), WorkspaceFactory.create()
    _dev_sync(mine.pk, "session-1", DEV_ID)

    listed_mine = [r["runner_id"] for r in api_client_for(mine).get("/api/v1/runners").json()["items"]]
    listed_theirs = [r["runner_id"] for r in api_client_for(theirs).get("/api/v1/runners").json()["items"]]
    assert DEV_ID in listed_mine
    assert DEV_ID not in listed_theirs

    assert binding_prepare(workspace=mine, spec=_spec(DEV_ID))["runner_id"] == DEV_ID
    with pytest.raises(BindingValidationError) as refused:
        binding_prepare(workspace=theirs, spec=_spec(DEV_ID))
    assert "runner_id" in refused.value.fields


def test_a_runner_id_served_by_one_runtime_is_refused_to_another():
    workspace = WorkspaceFactory.create()
    runner_descriptors_sync(report=_report(DEV_ID))

    result = _dev_sync(workspace.pk, "session-1", DEV_ID)

    assert result.available == []
    assert "already served by the plugin runtime" in result.plugin_errors[0]["error"]
    descriptor = RunnerDescriptor.objects.get(runner_id=DEV_ID)
    assert (descriptor.source, descriptor.workspace_id) == ("runtime", None)


def test_a_runner_id_another_workspace_develops_is_refused_without_saying_who_holds_it():
    mine, theirs = WorkspaceFactory.create(), WorkspaceFactory.create()
    _dev_sync(theirs.pk, "their-session", DEV_ID)

    result = _dev_sync(mine.pk, "my-session", DEV_ID)

    assert result.available == []
    [error] = result.plugin_errors
    assert error["error"] == f"runner id {DEV_ID} is taken; give the runner another id"
    assert RunnerDescriptor.objects.get(runner_id=DEV_ID).workspace_id == theirs.pk


def test_a_runtime_marks_missing_only_its_own_runners_and_a_missing_one_may_be_taken_over():
    workspace = WorkspaceFactory.create()
    runner_descriptors_sync(report=_report("plugin:langbot/installed/default"))
    _dev_sync(workspace.pk, "session-1", DEV_ID)

    # The host's runtime no longer knowing the development runner does not mark it missing ...
    runner_descriptors_sync(report=_report("plugin:langbot/installed/default"))
    assert RunnerDescriptor.objects.get(runner_id=DEV_ID).status == RunnerDescriptor.Status.AVAILABLE
    # ... its own session ending does.
    assert _dev_sync(workspace.pk, "session-1").missing == [DEV_ID]
    assert RunnerDescriptor.objects.get(runner_id=DEV_ID).status == RunnerDescriptor.Status.MISSING

    # Once missing, the id is free: an installed plugin (or a new session) may serve it.
    runner_descriptors_sync(report=_report("plugin:langbot/installed/default", DEV_ID))
    descriptor = RunnerDescriptor.objects.get(runner_id=DEV_ID)
    assert (descriptor.source, descriptor.workspace_id, descriptor.status) == ("runtime", None, "available")
