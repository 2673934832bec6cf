"""REST CRUD of bindings: scoped to the caller's workspace, validated field by field, secrets never shown."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from bindings.models import AgentBinding, RunnerDescriptor
from bindings.services import binding_runner_config_plain
from foundation.crypto import SECRET_MASK
from tests.factories import BotFactory, UserFactory, WorkspaceFactory

pytestmark = pytest.mark.django_db


def body(runner, **overrides):
    data = {
        "binding_id": "support",
        "name": "Support",
        "scope": {"scope_type": "workspace"},
        "event_types": ["message.received"],
        "runner_id": runner.runner_id,
        "runner_config": {"greeting": "hello", "api_key": "sk-secret"},
    }
    data.update(overrides)
    return data


def fields_of(response) -> dict[str, str]:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_argument"
    return error["details"]["fields"]


def test_create_then_read_a_binding(api_client, workspace, runner):
    created = api_client.post("/api/v1/bindings", body(runner), format="json")

    assert created.status_code == 201, created.content
    read = api_client.get("/api/v1/bindings/support").json()
    assert read == created.json()
    assert read["scope"] == {"scope_type": "workspace", "scope_id": workspace.slug}
    assert read["runner_config"]["greeting"] == "hello"
    assert read["runner_config"]["max_rounds"] == 5  # default filled in on save
    assert read["concurrency_policy"] == "queue"
    assert read["timeout_seconds"] == 300
    assert read["delivery_policy"]["enable_reply"] is True


def test_secrets_are_masked_in_answers_and_kept_for_the_orchestrator(api_client, runner):
    created = api_client.post("/api/v1/bindings", body(runner), format="json").json()

    assert created["runner_config"]["api_key"] == SECRET_MASK
    assert "sk-secret" not in api_client.get("/api/v1/bindings").content.decode()
    assert binding_runner_config_plain(AgentBinding.objects.get())["api_key"] == "sk-secret"


def test_sending_the_mask_back_keeps_the_stored_secret(api_client, runner):
    created = api_client.post("/api/v1/bindings", body(runner), format="json").json()
    config = {**created["runner_config"], "greeting": "changed"}

    response = api_client.patch("/api/v1/bindings/support", {"runner_config": config}, format="json")

    assert response.status_code == 200, response.content
    plain = binding_runner_config_plain(AgentBinding.objects.get())
    assert plain["api_key"] == "sk-secret"
    assert plain["greeting"] == "changed"


def test_a_new_secret_value_replaces_the_stored_one(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")

    api_client.patch(
        "/api/v1/bindings/support", {"runner_config": {"greeting": "x", "api_key": "sk-new"}}, format="json"
    )

    assert binding_runner_config_plain(AgentBinding.objects.get())["api_key"] == "sk-new"


def test_a_binding_id_is_generated_when_omitted(api_client, runner):
    data = body(runner, name="Night Shift")
    del data["binding_id"]

    created = api_client.post("/api/v1/bindings", data, format="json").json()

    assert created["binding_id"] == "night-shift"


def test_a_duplicate_binding_id_is_a_field_error(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")

    assert "binding_id" in fields_of(api_client.post("/api/v1/bindings", body(runner), format="json"))


def test_list_shows_only_the_callers_workspace(api_client, api_client_for, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")
    other = api_client_for(WorkspaceFactory.create())
    other.post("/api/v1/bindings", body(runner, binding_id="theirs"), format="json")

    items = api_client.get("/api/v1/bindings").json()["items"]

    assert [b["binding_id"] for b in items] == ["support"]


def test_another_workspaces_binding_answers_404_for_every_method(api_client, api_client_for, runner):
    api_client_for(WorkspaceFactory.create()).post("/api/v1/bindings", body(runner, binding_id="theirs"), format="json")

    for response in (
        api_client.get("/api/v1/bindings/theirs"),
        api_client.patch("/api/v1/bindings/theirs", {"enabled": False}, format="json"),
        api_client.delete("/api/v1/bindings/theirs"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert AgentBinding.objects.get(binding_id="theirs").enabled is True


def test_delete_removes_the_binding(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")

    assert api_client.delete("/api/v1/bindings/support").status_code == 204
    assert api_client.get("/api/v1/bindings/support").status_code == 404


def test_a_workspace_cannot_create_a_global_binding(api_client, runner):
    response = api_client.post("/api/v1/bindings", body(runner, scope={"scope_type": "global"}), format="json")

    assert "scope.scope_type" in fields_of(response)
    assert not AgentBinding.objects.exists()


def test_bot_scope_needs_a_bot_of_the_callers_workspace(api_client, runner):
    foreign_bot = BotFactory.create(bot_id="elsewhere")

    response = api_client.post(
        "/api/v1/bindings", body(runner, scope={"scope_type": "bot", "scope_id": foreign_bot.bot_id}), format="json"
    )

    assert "scope.scope_id" in fields_of(response)


def test_bot_scope_with_an_own_bot_is_accepted(api_client, workspace, runner):
    BotFactory.create(workspace=workspace, bot_id="helpdesk")

    response = api_client.post(
        "/api/v1/bindings", body(runner, scope={"scope_type": "bot", "scope_id": "helpdesk"}), format="json"
    )

    assert response.status_code == 201
    assert response.json()["scope"] == {"scope_type": "bot", "scope_id": "helpdesk"}


def test_workspace_scope_cannot_name_another_workspace(api_client, runner):
    other = WorkspaceFactory.create()

    response = api_client.post(
        "/api/v1/bindings", body(runner, scope={"scope_type": "workspace", "scope_id": other.slug}), format="json"
    )

    assert "scope.scope_id" in fields_of(response)


@pytest.mark.parametrize(
    ("runner_id", "why"),
    [("not-a-runner-id", "malformed"), ("plugin:nobody/nothing/default", "unknown")],
)
def test_the_runner_must_be_a_valid_known_runner(api_client, runner, runner_id, why):
    assert "runner_id" in fields_of(
        api_client.post("/api/v1/bindings", body(runner, runner_id=runner_id), format="json")
    )


def test_a_missing_runner_is_refused(api_client, runner):
    RunnerDescriptor.objects.filter(pk=runner.pk).update(status=RunnerDescriptor.Status.MISSING)

    assert "runner_id" in fields_of(api_client.post("/api/v1/bindings", body(runner), format="json"))


def test_runner_config_errors_are_field_errors(api_client, runner):
    response = api_client.post(
        "/api/v1/bindings", body(runner, runner_config={"max_rounds": "many", "bogus": 1}), format="json"
    )

    assert set(fields_of(response)) == {
        "runner_config.greeting",
        "runner_config.max_rounds",
        "runner_config.bogus",
    }


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"event_types": []}, "event_types"),
        ({"event_types": ["Message Received"]}, "event_types.0"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": 3601}, "timeout_seconds"),
        ({"concurrency_policy": "whenever"}, "concurrency_policy"),
        ({"resource_policy": {"allowed_model_ids": ["m"], "colour": "red"}}, "resource_policy.colour"),
        ({"resource_policy": {"storage_areas": ["attic"]}}, "resource_policy.storage_areas.0"),
        ({"state_policy": {"state_scopes": ["galaxy"]}}, "state_policy.state_scopes.0"),
        ({"delivery_policy": {"max_message_size": 0}}, "delivery_policy.max_message_size"),
        ({"scope": {"scope_type": "planet"}}, "scope.scope_type"),
        ({"surprise": True}, "surprise"),
    ],
)
def test_invalid_fields_are_named_in_the_error(api_client, runner, override, field):
    assert field in fields_of(api_client.post("/api/v1/bindings", body(runner, **override), format="json"))


def test_policies_are_stored_and_returned(api_client, runner):
    policies = {
        "resource_policy": {
            "allowed_model_ids": ["gpt-x"],
            "allowed_tool_names": ["*"],
            "allowed_kb_ids": [],
            "storage_areas": ["workspace"],
            "platform_actions": ["reply"],
            "require_action_approval": False,
            "history_conversations": ["support-42"],
            "history_same_actor": True,
        },
        "state_policy": {"enable_state": False, "state_scopes": ["conversation"]},
        "delivery_policy": {
            "enable_streaming": False,
            "enable_reply": False,
            "max_message_size": 2000,
            "non_text_input": "refuse",
            "group_reply": "plain",
        },
    }

    created = api_client.post("/api/v1/bindings", body(runner, **policies), format="json").json()

    assert {k: created[k] for k in policies} == policies


def test_patch_changes_only_the_given_fields(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner, priority=3), format="json")

    response = api_client.patch("/api/v1/bindings/support", {"enabled": False}, format="json")

    assert response.status_code == 200
    assert response.json()["enabled"] is False
    assert response.json()["priority"] == 3
    assert response.json()["runner_config"]["greeting"] == "hello"


def test_patch_cannot_change_the_binding_id(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")

    response = api_client.patch("/api/v1/bindings/support", {"binding_id": "renamed"}, format="json")

    assert "binding_id" in fields_of(response)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"event_types": []}, "event_types"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": 10**6}, "timeout_seconds"),
        ({"priority": 10**12}, "priority"),
        ({"name": "n" * 201}, "name"),
    ],
)
def test_patch_holds_each_field_to_the_same_rules_as_create(api_client, runner, patch, field):
    api_client.post("/api/v1/bindings", body(runner), format="json")

    response = api_client.patch("/api/v1/bindings/support", patch, format="json")

    assert field in fields_of(response)
    stored = api_client.get("/api/v1/bindings/support").json()
    assert (stored["event_types"], stored["timeout_seconds"], stored["priority"]) == (["message.received"], 300, 0)


def test_a_stored_binding_that_breaks_a_rule_is_named_by_a_patch_and_can_be_repaired(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")
    AgentBinding.objects.filter(binding_id="support").update(event_types=[])  # e.g. written by an older version

    refused = api_client.patch("/api/v1/bindings/support", {"name": "renamed"}, format="json")
    repaired = api_client.patch("/api/v1/bindings/support", {"event_types": ["message.*"]}, format="json")

    assert "event_types" in fields_of(refused)
    assert repaired.status_code == 200, repaired.content
    assert repaired.json()["event_types"] == ["message.*"]


def test_a_binding_whose_runner_went_missing_can_still_be_disabled(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")
    RunnerDescriptor.objects.filter(pk=runner.pk).update(status=RunnerDescriptor.Status.MISSING)

    assert api_client.patch("/api/v1/bindings/support", {"enabled": False}, format="json").status_code == 200
    assert "runner_id" in fields_of(
        api_client.patch("/api/v1/bindings/support", {"runner_config": {"greeting": "x"}}, format="json")
    )


def test_switching_runner_checks_the_stored_config_against_the_new_schema(api_client, runner):
    api_client.post("/api/v1/bindings", body(runner), format="json")
    from tests.factories import RunnerDescriptorFactory

    plain_runner = RunnerDescriptorFactory.create(config_schema=[{"name": "greeting", "label": "G", "type": "string"}])

    response = api_client.patch("/api/v1/bindings/support", {"runner_id": plain_runner.runner_id}, format="json")

    assert "runner_config.api_key" in fields_of(response)


def _session_client(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def test_a_session_user_acts_in_their_only_workspace(workspace, runner):
    from bindings.services import workspace_member_add

    user = UserFactory.create()
    workspace_member_add(workspace=workspace, user=user)
    client = _session_client(user)

    created = client.post("/api/v1/bindings", body(runner), format="json")

    assert created.status_code == 201, created.content
    assert created.json()["workspace"] == workspace.slug


def test_a_session_user_of_several_workspaces_must_name_one(workspace, runner):
    from bindings.services import workspace_member_add

    user = UserFactory.create()
    second = WorkspaceFactory.create()
    workspace_member_add(workspace=workspace, user=user)
    workspace_member_add(workspace=second, user=user)
    client = _session_client(user)

    without = client.get("/api/v1/bindings")
    named = client.post(f"/api/v1/bindings?workspace={second.slug}", body(runner), format="json")

    assert without.status_code == 400
    assert "workspace" in without.json()["error"]["details"]["fields"]
    assert named.status_code == 201
    assert AgentBinding.objects.get().workspace == second


def test_a_session_user_cannot_name_a_workspace_they_do_not_belong_to(workspace):
    from bindings.services import workspace_member_add

    user = UserFactory.create()
    workspace_member_add(workspace=workspace, user=user)
    stranger = WorkspaceFactory.create()

    assert _session_client(user).get(f"/api/v1/bindings?workspace={stranger.slug}").status_code == 404
