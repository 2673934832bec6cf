"""A run can act only as itself (docs/security.md, "Runner code"): through the real worker and plugin runtime, a
runner that knows another active run's id cannot read or write anything of that run, whether it names the
run on the wire or builds the SDK proxy for a copy of its context; forged tokens and a token replayed after
its run ended are refused too. Every proxy action is tried (the list comes from the protocol, so a new action
is attacked by default), streamed ones included, over the stdio and the WebSocket runtime.

The attacker is the qa-runner (`proxy_calls`) or the test-only intruder plugin (tests/plugins/intruder).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from artifacts.models import Artifact
from artifacts.services import artifact_create_from_bytes
from artifacts.storage import artifact_storage
from langbot_sdk.protocol import PROXY_REQUEST_MODELS, ListAgentRunnersResponse
from langbot_sdk.runtime.loader import load_plugins
from runners.lifecycle.services import run_cancel_request
from runners.models import PlatformActionRequest, ProxyCallAudit, Run
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import WorkspaceFactory
from tests.processes import (
    REPO_ROOT,
    TEST_PLUGINS_DIR,
    WorkerProcess,
    post_message,
    wait_status,
    wait_terminal,
)
from transcripts.models import StateEntry, StorageEntry, TranscriptItem

pytestmark = pytest.mark.django_db(transaction=True)

INTRUDER_ID = "plugin:langbot-tests/intruder/default"
ACTIONS = sorted(action.value for action in PROXY_REQUEST_MODELS)
OPEN_POLICY = {
    "storage_areas": ["plugin", "binding", "workspace"],
    "platform_actions": ["message.send"],
    "require_action_approval": False,
}
SECRET = "victim-secret-text"


def _samples(victim: Victim) -> dict[str, dict[str, Any]]:
    """A payload per action that the victim run itself would be served: were a call accepted for the
    victim, it would read the victim's data or write into its workspace."""
    messages = [{"role": "user", "content": "hi"}]
    return {
        "invoke_llm": {"model_id": "m", "messages": messages},
        "invoke_llm_stream": {"model_id": "m", "messages": messages},
        "invoke_rerank": {"model_id": "m", "query": "q", "documents": ["a"]},
        "count_tokens": {"model_id": "m", "text": "hi"},
        "get_tool_detail": {"tool_name": "t"},
        "call_tool": {"tool_name": "t", "parameters": {}},
        "retrieve_knowledge_base": {"kb_id": "kb", "query_text": "q"},
        "history_page": {"limit": 10},
        "history_search": {"query": SECRET},
        "event_get": {"event_id": victim.event_id},
        "event_page": {"limit": 10},
        "artifact_metadata": {"artifact_id": victim.artifact_id},
        "artifact_read": {"artifact_id": victim.artifact_id, "offset": 0, "length": 8},
        "artifact_stream": {"artifact_id": victim.artifact_id, "chunk_size": 4},
        "artifact_upload_open": {"name": "stolen.txt", "size": 5},
        "artifact_upload_chunk": {"upload_id": "stolen", "offset": 0, "data_base64": "cHduZWQ="},
        "artifact_upload_finish": {"upload_id": "stolen", "size": 5, "sha256": "0" * 64},
        "artifact_upload_abort": {"upload_id": "stolen"},
        "state_get": {"scope": "conversation", "key": "stolen"},
        "state_set": {"scope": "conversation", "key": "stolen", "value": "pwned"},
        "state_delete": {"scope": "conversation", "key": "stolen"},
        "state_list": {"scope": "conversation"},
        "storage_get": {"area": "workspace", "key": "stolen"},
        "storage_set": {"area": "workspace", "key": "stolen", "value_base64": "cHduZWQ="},
        "storage_delete": {"area": "workspace", "key": "stolen"},
        "storage_list": {"area": "workspace"},
        "platform_request_action": {"action": "message.send", "payload": {"text": "pwned"}},
    }


class Victim:
    def __init__(self, run: Run, event_id: str, artifact_id: str) -> None:
        self.run = run
        self.run_id = str(run.run_id)
        self.workspace = run.workspace
        self.event_id = event_id
        self.artifact_id = artifact_id


@pytest.fixture(autouse=True)
def _remove_blobs():
    yield
    storage = artifact_storage()
    for key in Artifact.objects.values_list("storage_key", flat=True):
        storage.delete(key)


@pytest.fixture
def bindings(qa_report, transactional_db) -> Callable[..., Any]:
    """Bindings of the qa-runner or the intruder (both runners' descriptors synced)."""
    from tests.factories import AgentBindingFactory

    intruder = load_plugins([TEST_PLUGINS_DIR])
    runner_descriptors_sync(
        report=ListAgentRunnersResponse(
            runners=[*qa_report.runners, *intruder.manifests], plugins=[*qa_report.plugins, *intruder.reports]
        )
    )

    def make(workspace: Any, runner_id: str, **fields: Any) -> Any:
        return AgentBindingFactory.create(workspace=workspace, runner_id=runner_id, **fields)

    return make


@pytest.fixture
def victim(bindings) -> Iterator[Victim]:
    """A running qa-runner run in its own workspace, with a transcript, an event and an artifact to steal;
    cancelled at the end."""
    workspace = WorkspaceFactory.create()
    binding = bindings(
        workspace,
        "plugin:langbot/qa-runner/default",
        resource_policy=OPEN_POLICY,
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
    )
    artifact = artifact_create_from_bytes(
        workspace=workspace, data=SECRET.encode(), name="secret.txt", mime_type="text/plain",
        conversation_id="victim-conv", source=Artifact.Source.UPLOAD,
    )  # fmt: skip
    run = post_message(binding, f"qa:slow:120 {SECRET}", conversation_id="victim-conv")
    wait_status(run, "running")
    yield Victim(run, run.event.event_id, str(artifact.artifact_id))
    run_cancel_request(run=run, reason="test over")
    wait_terminal(run, timeout=20)


def _attack(binding: Any, *, conversation_id: str = "attacker-conv") -> tuple[dict[str, Any], Run]:
    run = wait_terminal(post_message(binding, "attack", conversation_id=conversation_id), timeout=60)
    assert run.status == "completed", run.error
    return json.loads(run.output), run


def _qa_attack(bindings: Callable[..., Any], workspace: Any, calls: list[dict[str, Any]]) -> tuple[dict[str, Any], Run]:
    binding = bindings(
        workspace,
        "plugin:langbot/qa-runner/default",
        resource_policy=OPEN_POLICY,
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
        runner_config={"behaviour": "proxy", "proxy_calls": calls},
    )
    report, run = _attack(binding)
    return {name: {"code": answer["code"]} for name, answer in report.items()}, run


def _intruder(bindings: Callable[..., Any], workspace: Any, **config: Any) -> tuple[dict[str, Any], Run]:
    binding = bindings(
        workspace,
        INTRUDER_ID,
        resource_policy=OPEN_POLICY,
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
        runner_config=config,
    )
    return _attack(binding)


def _audit_rows(run: Run, expected: int) -> list[ProxyCallAudit]:
    """The audit rows of `run`'s calls; the worker writes them in batches, a moment after the calls."""
    deadline = time.monotonic() + 10
    while True:
        rows = list(ProxyCallAudit.objects.filter(run_id=str(run.run_id)))
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def _assert_victim_untouched(victim: Victim, attacker_workspace: Any = None) -> None:
    assert not StateEntry.objects.filter(workspace=victim.workspace).exists()
    assert not StorageEntry.objects.filter(workspace=victim.workspace).exists()
    assert not PlatformActionRequest.objects.filter(workspace=victim.workspace).exists()
    assert not TranscriptItem.objects.filter(workspace=victim.workspace, content="pwned").exists()
    # The victim itself makes no calls: no audit row may be recorded as the victim's.
    assert not ProxyCallAudit.objects.filter(run_id=victim.run_id).exists()
    if attacker_workspace is not None and attacker_workspace.pk != victim.workspace.pk:
        assert not ProxyCallAudit.objects.filter(workspace_id=victim.workspace.pk).exists()
    victim.run.refresh_from_db()
    assert victim.run.status == "running"


ATTACKERS = [
    pytest.param("qa-runner", "wire", "other", id="same-plugin-other-workspace-wire"),
    pytest.param("intruder", "wire", "other", id="other-plugin-other-workspace-wire"),
    pytest.param("intruder", "sdk", "other", id="other-plugin-other-workspace-sdk"),
    pytest.param("intruder", "sdk_own_channel", "other", id="other-plugin-other-workspace-sdk-own-channel"),
    pytest.param("intruder", "wire", "same", id="other-plugin-same-workspace-wire"),
    pytest.param("intruder", "sdk", "same", id="other-plugin-same-workspace-sdk"),
    pytest.param("intruder", "sdk_own_channel", "same", id="other-plugin-same-workspace-sdk-own-channel"),
]


@pytest.mark.parametrize(("attacker", "mode", "where"), ATTACKERS)
def test_a_runner_cannot_act_for_another_active_run(worker, bindings, victim, attacker, mode, where):
    # given a victim run that is running, and a runner that knows its id
    workspace = victim.workspace if where == "same" else WorkspaceFactory.create()
    samples = _samples(victim)
    calls: list[dict[str, Any]] = [{"action": action, "data": samples.get(action, {})} for action in ACTIONS]

    # when the runner calls every proxy action as the victim run
    if attacker == "qa-runner":
        wire_calls = [
            {"name": action, "action": action, "data": {**samples.get(action, {}), "run_id": victim.run_id}}
            for action in ACTIONS
        ]
        report, attacker_run = _qa_attack(bindings, workspace, wire_calls)
    else:
        report, attacker_run = _intruder(bindings, workspace, mode=mode, target_run_id=victim.run_id, calls=calls)

    # then every call is refused as unauthorized, whatever the action
    assert sorted(report) == ACTIONS
    not_refused = {action: answer for action, answer in report.items() if answer.get("code") != "unauthorized"}
    assert not_refused == {}
    # and nothing of the victim was read or written, nor recorded as the victim's
    reached_host = mode != "sdk"
    rows = _audit_rows(attacker_run, len(ACTIONS) if reached_host else 0)
    _assert_victim_untouched(victim, workspace)
    if reached_host:
        # refused under the caller's own identity, naming the run it tried to act for
        assert sorted(r.action for r in rows) == ACTIONS
        assert {(r.outcome, r.workspace_id, r.resource) for r in rows} == {
            ("unauthorized", attacker_run.workspace_id, f"run_id={victim.run_id}")
        }
    else:
        # the SDK refuses before anything is sent: the proxy of a copied context has no channel
        assert rows == []


def test_the_same_calls_for_its_own_run_are_served(worker, bindings, victim):
    # The refusals above are the run check's, not the payloads': made for the caller's own run, the calls
    # that touch its own conversation and workspace are served.
    workspace = WorkspaceFactory.create()
    samples = _samples(victim)
    served = ["history_page", "history_search", "event_page", "state_set", "state_get", "state_list",
              "storage_set", "storage_get", "storage_list", "platform_request_action"]  # fmt: skip
    calls = [{"action": action, "data": samples[action]} for action in served]

    report, _ = _intruder(bindings, workspace, mode="wire", target_run_id="$self", calls=calls)

    assert {action: answer.get("ok") for action, answer in report.items()} == dict.fromkeys(served, True)
    assert StorageEntry.objects.filter(workspace=workspace, key="stolen").exists()


def test_a_forged_token_is_refused_for_every_action(worker, bindings, victim):
    workspace = WorkspaceFactory.create()
    samples = _samples(victim)
    forged = secrets.token_urlsafe(32)
    calls = [
        {"action": action, "data": {**samples.get(action, {}), "run_id": run_id, "run_token": forged,
                                    "caller_plugin_identity": "$identity"}}
        for action in ACTIONS
        for run_id in ("$self", victim.run_id)
    ]  # fmt: skip

    report, attacker_run = _intruder(bindings, workspace, mode="raw", calls=calls)

    assert {action: answer.get("code") for action, answer in report.items()} == dict.fromkeys(ACTIONS, "unauthorized")
    _assert_victim_untouched(victim)
    # an unknown token belongs to no run: the refusals are recorded under none, with the caller's identity
    unknown = ProxyCallAudit.objects.filter(run_id="", caller="langbot-tests/intruder")
    deadline = time.monotonic() + 10
    while unknown.count() < len(calls) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert unknown.count() == len(calls)
    assert set(unknown.values_list("outcome", "workspace_id")) == {("unauthorized", None)}
    assert not ProxyCallAudit.objects.filter(run_id=str(attacker_run.run_id)).exclude(outcome="unauthorized").exists()


def test_a_token_replayed_after_its_run_ended_is_refused(worker, bindings, victim):
    # given the credentials of a run that has ended
    workspace = WorkspaceFactory.create()
    whoami, ended = _intruder(bindings, workspace, mode="whoami")
    assert whoami["run_id"] == str(ended.run_id)
    assert len(whoami["run_token"]) >= 32
    samples = _samples(victim)
    credentials = {key: str(whoami[key]) for key in ("run_id", "run_token", "caller_plugin_identity")}
    calls = [{"action": action, "data": {**samples.get(action, {}), **credentials}} for action in ACTIONS]

    # when another run replays them for every action
    report, _ = _intruder(bindings, workspace, mode="raw", calls=calls)

    # then each call is refused and nothing is served for the ended run
    assert {action: answer.get("code") for action, answer in report.items()} == dict.fromkeys(ACTIONS, "unauthorized")
    assert not StorageEntry.objects.filter(workspace=workspace).exists()
    assert not StateEntry.objects.filter(workspace=workspace).exists()


def test_the_token_stays_out_of_the_runners_context(worker, qa_binding):
    run = wait_terminal(post_message(qa_binding(), "qa:echo_context x"))
    assert run.status == "completed"
    context = json.loads(run.output)
    assert "run_token" not in json.dumps(context)


# --- the same over a runtime connected by WebSocket ----------------------------------------------------


@pytest.fixture
def ws_worker(start_worker, celery_queue) -> Iterator[WorkerProcess]:
    """A worker whose runtime is a separate process it reaches over WebSocket, on a queue of its own."""
    from langbot_host.celery import app

    token = secrets.token_urlsafe(16)
    env = {**os.environ, "LANGBOT_RUNTIME_TOKEN": token}
    runtime = subprocess.Popen(
        [sys.executable, "-m", "langbot_sdk.runtime", "--listen", "127.0.0.1:0",
         "--plugins-dir", str(REPO_ROOT / "plugins"), "--plugins-dir", str(TEST_PLUGINS_DIR)],
        cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert runtime.stderr is not None
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = runtime.stderr.readline()
            assert line, "the runtime exited before listening"
            match = re.search(rb"listening on (ws://\S+)", line)
            url = match.group(1).decode() if match else None
        assert url is not None
        queue = f"{celery_queue}-ws-{uuid.uuid4().hex[:6]}"
        worker = start_worker(LANGBOT_RUNTIME_URL=url, LANGBOT_RUNTIME_TOKEN=token, CELERY_TASK_DEFAULT_QUEUE=queue)
        app.conf.task_default_queue = queue
        try:
            yield worker
        finally:
            app.conf.task_default_queue = celery_queue
            worker.stop()
    finally:
        runtime.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            runtime.wait(10)
        runtime.kill()


def test_over_a_websocket_runtime_a_runner_cannot_act_for_another_run(ws_worker, bindings):
    victim_workspace = WorkspaceFactory.create()
    victim_binding = bindings(victim_workspace, "plugin:langbot/qa-runner/default", resource_policy=OPEN_POLICY)
    victim_run = post_message(victim_binding, f"qa:slow:120 {SECRET}", conversation_id="victim-conv")
    wait_status(victim_run, "running")
    victim = Victim(victim_run, victim_run.event.event_id, "00000000-0000-0000-0000-000000000000")
    try:
        samples = _samples(victim)
        calls = [{"action": action, "data": samples.get(action, {})} for action in ACTIONS]
        report, attacker_run = _intruder(
            bindings, WorkspaceFactory.create(), mode="wire", target_run_id=victim.run_id, calls=calls
        )
        assert {action: answer.get("code") for action, answer in report.items()} == dict.fromkeys(
            ACTIONS, "unauthorized"
        )
        rows = _audit_rows(attacker_run, len(ACTIONS))
        assert sorted(r.action for r in rows) == ACTIONS
        _assert_victim_untouched(victim)
    finally:
        run_cancel_request(run=victim_run, reason="test over")
        wait_terminal(victim_run, timeout=20)
