"""The checks every call goes through, the audit trail, and the state, storage, artifact, platform and
provider families through the real handlers."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from django.utils import timezone

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from langbot_sdk.protocol import limits
from runners.actions.platform_actions import platform_action_approve
from runners.models import PlatformActionRequest, ProxyCallAudit
from tests.factories import BotFactory
from transcripts.models import StorageEntry, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)


def _artifact(run, data: bytes = b"0123456789" * 100, *, conversation_id: str | None = None, **extra):
    return artifact_create_from_bytes(
        workspace=run.workspace,
        data=data,
        name="notes.txt",
        mime_type="text/plain",
        conversation_id=run.conversation_id if conversation_id is None else conversation_id,
        source=Artifact.Source.RUNNER,
        **extra,
    )


# --- session, identity, audit ------------------------------------------------------------------------


def test_a_finished_run_is_unauthorized(host_run):
    run = host_run()
    run.active = False
    assert run.refused("state_get", scope="conversation", key="k").code == "unauthorized"


def test_a_forged_caller_identity_is_unauthorized(host_run):
    run = host_run()
    run.identity = "evil/plugin"
    assert run.refused("history_page").code == "unauthorized"


def test_a_passed_deadline_is_deadline_exceeded(host_run):
    run = host_run()
    run.deadline_at = timezone.now().timestamp() - 1
    assert run.refused("history_page").code == "deadline_exceeded"


def test_every_call_allowed_or_refused_is_audited(host_run):
    run = host_run()
    run.call("state_set", scope="conversation", key="k", value=1)
    run.refused("storage_get", area="workspace", key="k")
    run.identity = "evil/plugin"
    run.refused("history_page")
    rows = list(ProxyCallAudit.objects.filter(run_id=str(run.run.run_id)).order_by("id"))
    assert [(r.action, r.outcome) for r in rows] == [
        ("state_set", "ok"),
        ("storage_get", "unauthorized"),
        ("history_page", "unauthorized"),
    ]
    assert rows[0].runner_id == run.run.runner_id
    assert rows[0].resource == "scope=conversation key=k"
    assert rows[0].scope == run.conversation_id
    assert rows[2].caller == "evil/plugin"
    assert all(r.duration_ms >= 0 for r in rows)


def test_text_the_database_cannot_store_is_invalid_argument_and_the_audit_goes_on(host_run):
    run = host_run()
    nul = run.refused("state_set", scope="conversation", key="k", value={"text": "a\x00b"})
    lone = run.refused("state_set", scope="conversation", key="k", value={"key\ud800": 1})
    run.call("state_set", scope="conversation", key="k", value=1)

    assert (nul.code, nul.error.details) == ("invalid_argument", {"field": "value.text"})
    assert (lone.code, lone.error.details) == ("invalid_argument", {"field": "value"})
    rows = ProxyCallAudit.objects.filter(run_id=str(run.run.run_id)).order_by("id")
    assert list(rows.values_list("outcome", flat=True)) == ["invalid_argument", "invalid_argument", "ok"]


def test_a_run_id_the_database_cannot_store_is_refused_and_audited_under_the_caller(host_run):
    run = host_run()
    own = str(run.run.run_id)
    run.run.run_id = "not\x00a-run"  # only the payload's copy; the row is untouched

    assert run.refused("history_page").code == "unauthorized"
    row = ProxyCallAudit.objects.get(outcome="unauthorized")
    assert (row.run_id, row.resource) == (own, "run_id=not\ufffda-run")


# --- state -------------------------------------------------------------------------------------------


def test_state_round_trip_and_isolation_between_bindings(host_run):
    one = host_run()
    other = host_run(workspace=one.workspace)
    one.call("state_set", scope="conversation", key="k", value={"n": 1})
    assert one.call("state_get", scope="conversation", key="k") == {"found": True, "value": {"n": 1}}
    assert other.call("state_get", scope="conversation", key="k")["found"] is False
    assert one.call("state_list", scope="conversation")["keys"] == ["k"]
    assert one.call("state_delete", scope="conversation", key="k") == {"deleted": True}


def test_state_value_over_256_kib_is_payload_too_large(host_run):
    run = host_run()
    big = "x" * (limits.STATE_VALUE_MAX_BYTES + 1)
    assert run.refused("state_set", scope="runner", key="k", value=big).code == "payload_too_large"


def test_state_list_limit_is_clamped_to_100(host_run):
    run = host_run()
    for i in range(105):
        run.call("state_set", scope="binding", key=f"k{i:03}", value=i)
    listed = run.call("state_list", scope="binding", limit=1000)
    assert len(listed["keys"]) == 100
    assert listed["has_more"] is True


def test_state_scope_outside_the_policy_is_unauthorized(host_run):
    run = host_run(state_policy={"state_scopes": ["conversation"]})
    assert run.refused("state_get", scope="runner", key="k").code == "unauthorized"


# --- storage -----------------------------------------------------------------------------------------


def test_storage_keeps_bytes_per_area(host_run):
    run = host_run(resource_policy={"storage_areas": ["plugin", "binding", "workspace"]})
    value = bytes(range(256))
    encoded = base64.b64encode(value).decode()
    assert run.call("storage_set", area="plugin", key="blob", value_base64=encoded)["size"] == 256
    got = run.call("storage_get", area="plugin", key="blob")
    assert base64.b64decode(got["value_base64"]) == value
    assert run.call("storage_get", area="binding", key="blob")["found"] is False
    assert run.call("storage_list", area="plugin")["keys"] == ["blob"]
    assert run.call("storage_delete", area="plugin", key="blob")["deleted"] is True


def test_storage_workspace_area_needs_the_binding_grant(host_run):
    run = host_run()  # default policy: plugin and binding only
    assert run.refused("storage_set", area="workspace", key="k", value_base64="AA==").code == "unauthorized"


def test_storage_area_missing_from_the_manifest_is_unauthorized(host_run):
    run = host_run(permissions={"storage": ["binding"]})
    assert run.refused("storage_get", area="plugin", key="k").code == "unauthorized"


def test_storage_value_over_10_mib_is_payload_too_large(host_run):
    run = host_run()
    big = base64.b64encode(b"\0" * (limits.STORAGE_VALUE_MAX_BYTES + 1)).decode()
    assert run.refused("storage_set", area="plugin", key="k", value_base64=big).code == "payload_too_large"
    assert not StorageEntry.objects.exists()


def test_workspace_storage_is_shared_but_plugin_storage_is_not(host_run):
    policy = {"storage_areas": ["plugin", "workspace"]}
    one = host_run(resource_policy=policy)
    other = host_run(workspace=one.workspace, resource_policy=policy)
    one.call("storage_set", area="workspace", key="shared", value_base64="AQ==")
    one.call("storage_set", area="plugin", key="own", value_base64="AQ==")
    assert other.call("storage_get", area="workspace", key="shared")["found"] is True
    assert other.call("storage_get", area="plugin", key="own")["found"] is False


# --- artifacts ---------------------------------------------------------------------------------------


def test_artifact_metadata_read_and_stream_of_the_runs_conversation(host_run):
    run = host_run()
    data = bytes(range(256)) * 20
    artifact = _artifact(run, data)
    meta = run.call("artifact_metadata", artifact_id=str(artifact.artifact_id))
    assert (meta["size"], meta["sha256"]) == (len(data), artifact.sha256)
    read = run.call("artifact_read", artifact_id=str(artifact.artifact_id), offset=100, length=50)
    assert base64.b64decode(read["data_base64"]) == data[100:150]
    assert read["eof"] is False
    tail = run.call("artifact_read", artifact_id=str(artifact.artifact_id), offset=len(data) - 10)
    assert (tail["length"], tail["eof"]) == (10, True)
    chunks = run.call("artifact_stream", artifact_id=str(artifact.artifact_id), chunk_size=1000)
    assert b"".join(base64.b64decode(c["data_base64"]) for c in chunks) == data
    assert [c["eof"] for c in chunks] == [False] * (len(chunks) - 1) + [True]


def test_artifact_of_another_conversation_or_workspace_is_not_found(host_run):
    run = host_run(conversation_id="mine")
    theirs = _artifact(run, conversation_id="theirs")
    elsewhere = host_run()
    foreign = _artifact(elsewhere)
    for artifact in (theirs, foreign):
        assert run.refused("artifact_metadata", artifact_id=str(artifact.artifact_id)).code == "not_found"
    assert run.refused("artifact_read", artifact_id="not-a-uuid").code == "not_found"


def test_artifact_created_by_the_run_is_readable_without_a_conversation_match(host_run):
    run = host_run(conversation_id="mine")
    own = _artifact(run, conversation_id="", run_id=run.run.run_id)
    assert run.call("artifact_metadata", artifact_id=str(own.artifact_id))["run_id"] == str(run.run.run_id)


def test_expired_artifact_is_not_found(host_run):
    run = host_run()
    artifact = _artifact(run, expires_at=timezone.now() - timedelta(seconds=1))
    assert run.refused("artifact_read", artifact_id=str(artifact.artifact_id)).code == "not_found"


def test_artifact_read_length_is_clamped_to_10_mib(host_run):
    run = host_run()
    artifact = _artifact(run, b"\1" * (limits.ARTIFACT_READ_MAX_BYTES + 5))
    read = run.call("artifact_read", artifact_id=str(artifact.artifact_id), length=limits.ARTIFACT_READ_MAX_BYTES * 3)
    assert read["length"] == limits.ARTIFACT_READ_MAX_BYTES
    assert read["eof"] is False


def test_artifact_reads_need_the_manifest_permission(host_run):
    run = host_run(permissions={"artifacts": ["metadata"]})
    artifact = _artifact(run)
    assert run.refused("artifact_read", artifact_id=str(artifact.artifact_id)).code == "unauthorized"
    assert run.call("artifact_metadata", artifact_id=str(artifact.artifact_id))["name"] == "notes.txt"


# --- platform actions --------------------------------------------------------------------------------


def test_platform_action_not_in_the_binding_policy_is_refused_and_recorded(host_run):
    run = host_run()
    refused = run.refused("platform_request_action", action="message.send", payload={"text": "hi"})
    assert refused.code == "unauthorized"
    [request] = PlatformActionRequest.objects.filter(run=run.run)
    assert request.status == PlatformActionRequest.Status.REFUSED


def test_platform_action_waits_for_approval_then_executes_once(host_run):
    run = host_run(resource_policy={"platform_actions": ["message.send"]})
    refused = run.refused("platform_request_action", action="message.send", payload={"text": "approved hi"})
    assert refused.code == "unauthorized"
    assert refused.error.details["status"] == "pending_approval"
    request = PlatformActionRequest.objects.get(pk=refused.error.details["request_id"])
    assert not TranscriptItem.objects.filter(content="approved hi").exists()
    # when an operator approves it (twice)
    platform_action_approve(request=request, operator="admin")
    platform_action_approve(request=request, operator="admin")
    # then it was delivered once to the run's conversation
    request.refresh_from_db()
    assert request.status == PlatformActionRequest.Status.EXECUTED
    assert TranscriptItem.objects.filter(content="approved hi", conversation_id=run.conversation_id).count() == 1


def test_platform_action_without_approval_requirement_is_delivered_on_the_web_surface(host_run):
    policy = {"platform_actions": ["message.send", "message.edit"], "require_action_approval": False}
    run = host_run(resource_policy=policy)
    sent = run.call("platform_request_action", action="message.send", payload={"text": "extra"})
    assert sent["accepted"] is True
    item = TranscriptItem.objects.get(pk=int(sent["result"]["message_id"]))
    assert (item.role, item.content, item.conversation_id) == ("assistant", "extra", run.conversation_id)
    edited = run.call(
        "platform_request_action", action="message.edit", target={"message_id": str(item.pk)}, payload={"text": "v2"}
    )
    assert edited["accepted"] is True
    item.refresh_from_db()
    assert item.content == "v2"


def test_platform_action_on_a_message_of_another_conversation_is_not_found(host_run):
    policy = {"platform_actions": ["message.edit"], "require_action_approval": False}
    run = host_run(conversation_id="mine", resource_policy=policy)
    foreign = TranscriptItem.objects.create(workspace=run.workspace, conversation_id="theirs", role="assistant")
    refused = run.refused(
        "platform_request_action", action="message.edit", target={"message_id": str(foreign.pk)}, payload={"text": "x"}
    )
    assert refused.code == "not_found"


def test_platform_action_on_a_surface_without_an_adapter_is_unsupported(host_run):
    run = host_run(resource_policy={"platform_actions": ["message.send"], "require_action_approval": False})
    bot = BotFactory.create(workspace=run.workspace, platform="other")
    run.run.bot = bot
    run.run.save(update_fields=["bot"])
    refused = run.refused("platform_request_action", action="message.send", payload={"text": "x"})
    assert refused.code == "runtime_error"
    assert "unsupported" in refused.error.message


# --- models, tools, knowledge ------------------------------------------------------------------------


def test_models_tools_and_knowledge_are_unauthorized_outside_the_snapshot(host_run):
    run = host_run()
    messages = [{"role": "user", "content": "hi"}]
    assert run.refused("invoke_llm", model_id="m1", messages=messages).code == "unauthorized"
    assert run.refused("call_tool", tool_name="search").code == "unauthorized"
    assert run.refused("retrieve_knowledge_base", kb_id="kb", query_text="q").code == "unauthorized"


def test_a_selected_model_or_a_named_tool_with_no_row_is_not_in_the_snapshot(host_run):
    run = host_run(config={"model": "m1"}, resource_policy={"allowed_model_ids": ["m1"], "allowed_tool_names": ["t"]})
    assert run.built.context.resources.tools == []
    assert run.refused("invoke_llm", model_id="m1", messages=[]).code == "unauthorized"
    assert run.refused("get_tool_detail", tool_name="t").code == "unauthorized"
