"""Per API, through the real runtime and worker: an allowed call works; a binding policy that does not
grant it → `unauthorized`; another conversation's or workspace's object → `not_found`; over-cap →
`payload_too_large` or clamped as documented; a finished run's id → `unauthorized`; a forged caller
identity → `unauthorized`.

Missing *manifest* permissions cannot be shown with the qa-runner (its manifest asks for everything);
they are covered through the same handlers in tests/handlers.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from typing import Any

import pytest

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from artifacts.storage import artifact_storage
from foundation.sql import DatabaseExecutor
from hostapi.dispatch import proxy_handlers
from langbot_sdk.protocol import AgentAPIException, limits
from runners.access.session import RunSession
from runners.models import PlatformActionRequest, ProxyCallAudit, Run
from tests.factories import WorkspaceFactory
from tests.processes import post_message, wait_terminal
from transcripts.models import EventLog, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)

OPEN_POLICY = {
    "storage_areas": ["plugin", "binding", "workspace"],
    "platform_actions": ["message.send"],
    "require_action_approval": False,
}


@pytest.fixture(autouse=True)
def _remove_blobs():
    # The worker subprocess reads the artifacts a test writes, so both use the configured storage; the
    # blobs are removed afterwards.
    yield
    storage = artifact_storage()
    for key in Artifact.objects.values_list("storage_key", flat=True):
        storage.delete(key)


def _ok(report: dict[str, Any], *names: str) -> None:
    for name in names:
        assert report[name]["ok"] is True, (name, report[name])


def _code(report: dict[str, Any], name: str) -> str:
    assert report[name]["ok"] is False, (name, report[name])
    return str(report[name]["code"])


def test_every_granted_api_works(probe, qa_binding):
    binding = qa_binding(resource_policy=OPEN_POLICY)
    artifact = artifact_create_from_bytes(
        workspace=binding.workspace, data=b"conformance bytes", name="c.txt", mime_type="text/plain",
        conversation_id="conf-a", source=Artifact.Source.UPLOAD,
    )  # fmt: skip
    seed = EventLog.objects.create(
        workspace=binding.workspace, event_id=f"seed-{uuid.uuid4().hex[:6]}", event_type="message.received",
        source="api", conversation_id="conf-a", input={"text": "earlier"},
    )  # fmt: skip
    TranscriptItem.objects.create(workspace=binding.workspace, conversation_id="conf-a", role="user", content="earlier")
    aid = str(artifact.artifact_id)
    report = probe(
        {
            "history.page": ("history_page", {"limit": 10}),
            "history.search": ("history_search", {"query": "earlier"}),
            "events.get": ("event_get", {"event_id": seed.event_id}),
            "events.page": ("event_page", {"limit": 10}),
            "artifacts.metadata": ("artifact_metadata", {"artifact_id": aid}),
            "artifacts.read": ("artifact_read", {"artifact_id": aid, "offset": 0, "length": 11}),
            "artifacts.stream": ("artifact_stream", {"artifact_id": aid, "chunk_size": 4}),
            "state.set": ("state_set", {"scope": "conversation", "key": "k", "value": {"v": 1}}),
            "state.get": ("state_get", {"scope": "conversation", "key": "k"}),
            "state.list": ("state_list", {"scope": "conversation"}),
            "state.delete": ("state_delete", {"scope": "conversation", "key": "k"}),
            "storage.set": ("storage_set", {"area": "workspace", "key": "k", "value_base64": "aGk="}),
            "storage.get": ("storage_get", {"area": "workspace", "key": "k"}),
            "storage.list": ("storage_list", {"area": "workspace"}),
            "storage.delete": ("storage_delete", {"area": "workspace", "key": "k"}),
            "platform.send": ("platform_request_action", {"action": "message.send", "payload": {"text": "sent"}}),
        },
        binding=binding,
    )
    _ok(report, *[name for name in report if not name.startswith("__")])
    assert [i["content"] for i in report["history.page"]["result"]["items"]][-2:] == ["earlier", "probe"]
    assert report["history.search"]["result"]["items"][0]["item"]["content"] == "earlier"
    assert report["events.get"]["result"]["input"]["text"] == "earlier"
    assert base64.b64decode(report["artifacts.read"]["result"]["data_base64"]) == b"conformance"
    assert report["artifacts.stream"]["result"]["chunks"] == 5
    assert report["state.get"]["result"] == {"found": True, "value": {"v": 1}}
    assert report["storage.get"]["result"]["value_base64"] == "aGk="
    assert TranscriptItem.objects.filter(content="sent", conversation_id="conf-a").exists()
    run: Run = report["__run__"]
    audited: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 10
    while len(audited) < len(report) - 1 and time.monotonic() < deadline:
        # The worker writes audit rows in batches, a moment after the calls.
        time.sleep(0.1)
        audited = set(ProxyCallAudit.objects.filter(run_id=str(run.run_id)).values_list("action", "outcome"))
    assert ("platform_request_action", "ok") in audited
    assert ("artifact_stream", "ok") in audited


def test_apis_the_binding_does_not_grant_are_unauthorized(probe):
    report = probe(
        {
            "state.get": ("state_get", {"scope": "conversation", "key": "k"}),
            "storage.plugin": ("storage_get", {"area": "plugin", "key": "k"}),
            "storage.workspace": ("storage_get", {"area": "workspace", "key": "k"}),
            "platform": ("platform_request_action", {"action": "message.send", "payload": {"text": "x"}}),
            "model": ("invoke_llm", {"model_id": "gpt", "messages": []}),
            "tool": ("call_tool", {"tool_name": "search"}),
            "knowledge": ("retrieve_knowledge_base", {"kb_id": "kb", "query_text": "q"}),
        },
        resource_policy={"storage_areas": []},
        state_policy={"enable_state": False},
    )
    for name in ("state.get", "storage.plugin", "storage.workspace", "platform", "model", "tool", "knowledge"):
        assert _code(report, name) == "unauthorized", name
    assert PlatformActionRequest.objects.filter(status="refused").count() == 1


def test_platform_action_needing_approval_is_unauthorized_until_approved(probe):
    report = probe(
        {"send": ("platform_request_action", {"action": "message.send", "payload": {"text": "later"}})},
        resource_policy={"platform_actions": ["message.send"]},
    )
    assert _code(report, "send") == "unauthorized"
    assert report["send"]["details"]["status"] == "pending_approval"
    assert not TranscriptItem.objects.filter(content="later").exists()


def test_objects_of_another_conversation_or_workspace_are_not_found(probe, qa_binding):
    binding = qa_binding()
    other_event = EventLog.objects.create(
        workspace=binding.workspace, event_id=f"other-{uuid.uuid4().hex[:6]}", event_type="message.received",
        source="api", conversation_id="conf-b", input={"text": "elsewhere"},
    )  # fmt: skip
    other_conversation = artifact_create_from_bytes(
        workspace=binding.workspace, data=b"b", name="b", mime_type="", conversation_id="conf-b", source="upload"
    )
    other_workspace = artifact_create_from_bytes(
        workspace=WorkspaceFactory.create(),
        data=b"w",
        name="w",
        mime_type="",
        conversation_id="conf-a",
        source="upload",
    )
    report = probe(
        {
            "history.page": ("history_page", {"conversation_id": "conf-b"}),
            "history.search": ("history_search", {"query": "x", "filters": {"conversation_id": "conf-b"}}),
            "events.get": ("event_get", {"event_id": other_event.event_id}),
            "events.page": ("event_page", {"conversation_id": "conf-b"}),
            "artifact.conversation": ("artifact_metadata", {"artifact_id": str(other_conversation.artifact_id)}),
            "artifact.workspace": ("artifact_read", {"artifact_id": str(other_workspace.artifact_id)}),
        },
        binding=binding,
    )
    for name in [n for n in report if not n.startswith("__")]:
        assert _code(report, name) == "not_found", name


def test_over_cap_requests_are_refused_or_clamped_as_documented(probe, qa_binding):
    binding = qa_binding()
    TranscriptItem.objects.bulk_create(
        TranscriptItem(workspace=binding.workspace, conversation_id="conf-a", role="user", content=f"m{i}")
        for i in range(120)
    )
    big_state = {"$text": limits.STATE_VALUE_MAX_BYTES + 1}
    report = probe(
        {
            "history.limit": ("history_page", {"limit": 500}),
            "search.top_k": ("history_search", {"query": "m1", "top_k": 500}),
            "events.limit": ("event_page", {"limit": 500}),
            "state.value": ("state_set", {"scope": "conversation", "key": "k", "value": big_state}),
            "storage.value": (
                "storage_set",
                {"area": "plugin", "key": "k", "value_base64": {"$base64_bytes": limits.STORAGE_VALUE_MAX_BYTES + 1}},
            ),
            "state.list": ("state_list", {"scope": "conversation", "limit": 5000}),
        },
        binding=binding,
    )
    assert len(report["history.limit"]["result"]["items"]) == limits.HISTORY_PAGE_MAX
    assert report["history.limit"]["result"]["has_more"] is True
    assert len(report["search.top_k"]["result"]["items"]) <= limits.HISTORY_SEARCH_TOP_K_MAX
    assert report["events.limit"]["ok"] is True
    assert report["state.list"]["ok"] is True
    assert _code(report, "state.value") == "payload_too_large"
    assert _code(report, "storage.value") == "payload_too_large"


def test_a_finished_runs_id_is_unauthorized(probe, qa_binding):
    binding = qa_binding()
    finished = wait_terminal(post_message(binding, "qa:ok earlier"))
    assert finished.status == "completed"
    report = probe(
        {
            "history": ("history_page", {"run_id": str(finished.run_id)}),
            "state": ("state_get", {"run_id": str(finished.run_id), "scope": "conversation", "key": "k"}),
        },
        binding=binding,
    )
    assert _code(report, "history") == "unauthorized"
    assert _code(report, "state") == "unauthorized"


def test_a_runner_cannot_choose_its_caller_identity(probe):
    # The runtime stamps the identity over whatever the runner sends: the call goes through as itself.
    report = probe({"forged": ("history_page", {"caller_plugin_identity": "evil/plugin"})})
    _ok(report, "forged")


def test_a_forged_caller_identity_on_the_host_connection_is_unauthorized(worker, qa_binding):
    # given the session of a real run, as the worker holds it
    binding = qa_binding()
    run = wait_terminal(post_message(binding, "qa:ok x"))
    session = RunSession.from_authorization(
        run_id=str(run.run_id), run_pk=run.pk, lease_token="", data=run.authorization or {}
    )
    executor = DatabaseExecutor(1)
    handlers = proxy_handlers(
        sessions=lambda token: (session, 4e9) if token == session.run_token else None, db=executor
    )

    async def forged() -> AgentAPIException:
        frame = {
            "run_id": str(run.run_id),
            "caller_plugin_identity": "evil/plugin",
            "run_token": session.run_token,
            "conversation_id": None,
        }
        with pytest.raises(AgentAPIException) as caught:
            await handlers["history_page"](frame, None)  # type: ignore[arg-type,misc]
        return caught.value

    try:
        # when a frame arrives with another plugin's identity
        error = asyncio.run(forged())
    finally:
        executor.shutdown()
    # then it is refused before anything is read
    assert error.code == "unauthorized"
    assert session.plugin_identity == "langbot/qa-runner"
