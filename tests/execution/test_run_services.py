"""run_create's concurrency policies, run_cancel_request, the sweeper and the state/proxy checks —
without a worker (the broker send is replaced by a recorder)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from foundation.sql import DatabaseExecutor
from hostapi.dispatch import proxy_handlers
from langbot_sdk.protocol import (
    AgentAPIException,
    AgentResources,
    ContextAPICapabilities,
    StateResource,
    StorageResource,
    limits,
)
from runners.access.scope import RunScope
from runners.access.session import RunSession, run_session_active
from runners.lifecycle.services import run_cancel_request, run_create, runs_sweep
from runners.models import Run
from tests.factories import AgentBindingFactory, WorkspaceFactory
from transcripts.models import EventLog
from transcripts.state import state_keys, state_write

pytestmark = pytest.mark.django_db


@pytest.fixture
def dispatched(monkeypatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr("runners.lifecycle.services.run_dispatch", lambda *, run_id: sent.append(run_id))
    monkeypatch.setattr("runners.lifecycle.services.cancel_notify", lambda **kwargs: None)
    return sent


def _event(workspace, conversation_id: str = "c1") -> EventLog:
    n = EventLog.objects.count()
    return EventLog.objects.create(
        workspace=workspace, event_id=f"e{n}", event_type="message.received", source="api",
        conversation_id=conversation_id, input={"text": "hi"},
    )  # fmt: skip


def test_a_new_run_is_queued_and_sent_after_commit(dispatched, django_capture_on_commit_callbacks):
    binding = AgentBindingFactory.create()
    with django_capture_on_commit_callbacks(execute=True):
        run = run_create(event=_event(binding.workspace), binding=binding, observer=False)
        assert dispatched == []
    assert run.status == Run.Status.QUEUED
    assert dispatched == [str(run.run_id)]
    assert (run.binding_key, run.runner_id, run.conversation_id) == (binding.binding_id, binding.runner_id, "c1")


def test_reject_policy_fails_the_new_run_while_one_is_active(dispatched, django_capture_on_commit_callbacks):
    binding = AgentBindingFactory.create(concurrency_policy="reject")
    first = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    with django_capture_on_commit_callbacks(execute=True):
        second = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    assert first.status == Run.Status.QUEUED
    assert second.status == Run.Status.FAILED
    assert second.status_reason == "rejected"
    assert (second.error or {})["code"] == "conversation.busy"
    assert str(second.run_id) not in dispatched
    third = run_create(event=_event(binding.workspace, "another"), binding=binding, observer=False)
    assert third.status == Run.Status.QUEUED


def test_interrupt_policy_cancels_earlier_queued_runs(dispatched):
    binding = AgentBindingFactory.create(concurrency_policy="interrupt")
    first = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    second = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    first.refresh_from_db()
    assert first.status == Run.Status.CANCELLED
    assert first.status_reason == "interrupted by a newer message"
    assert second.status == Run.Status.QUEUED


def test_interrupt_policy_requests_cancel_of_a_running_run(dispatched):
    binding = AgentBindingFactory.create(concurrency_policy="interrupt")
    first = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    Run.objects.filter(pk=first.pk).update(status=Run.Status.RUNNING)
    run_create(event=_event(binding.workspace), binding=binding, observer=False)
    first.refresh_from_db()
    assert first.status == Run.Status.RUNNING
    assert first.cancel_requested_at is not None
    assert first.cancel_reason == "interrupted by a newer message"


def test_cancel_request_is_idempotent(dispatched):
    binding = AgentBindingFactory.create()
    run = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING)
    first = run_cancel_request(run=run, reason="stop")
    requested_at = first.cancel_requested_at
    second = run_cancel_request(run=run, reason="stop again")
    assert second.cancel_requested_at == requested_at
    assert second.cancel_reason == "stop"


def test_sweeper_fails_runs_whose_lease_expired(dispatched):
    binding = AgentBindingFactory.create()
    run = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    past = timezone.now() - timedelta(seconds=1)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, lease_expires_at=past)
    result = runs_sweep()
    run.refresh_from_db()
    assert result.lost == [str(run.run_id)]
    assert (run.status, run.status_reason, (run.error or {})["code"]) == ("failed", "worker_lost", "worker_lost")


def test_sweeper_leaves_runs_whose_lease_is_valid(dispatched):
    binding = AgentBindingFactory.create()
    run = run_create(event=_event(binding.workspace), binding=binding, observer=False)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING, lease_expires_at=timezone.now() + timedelta(seconds=10)
    )
    assert runs_sweep().lost == []
    assert run_session_active(str(run.run_id)) is not None
    assert run_session_active("not-a-uuid") is None


def test_state_values_over_the_cap_are_refused():
    workspace = WorkspaceFactory.create()
    with pytest.raises(AgentAPIException) as caught:
        state_write(
            workspace_id=workspace.pk, scope="conversation", scope_key="k", key="big",
            value="x" * limits.STATE_VALUE_MAX_BYTES, run_id=None,
        )  # fmt: skip
    assert caught.value.code == "payload_too_large"


def test_state_list_returns_at_most_the_limit_and_says_there_is_more():
    workspace = WorkspaceFactory.create()
    for i in range(5):
        state_write(workspace_id=workspace.pk, scope="runner", scope_key="s", key=f"k{i}", value=i, run_id=None)
    state_write(workspace_id=workspace.pk, scope="runner", scope_key="s", key="k0", value="again", run_id=None)
    keys, more = state_keys(workspace_id=workspace.pk, scope_key="s", prefix="k", limit=3)
    assert keys == ["k0", "k1", "k2"]
    assert more is True


TOKEN = "token-of-run-1"


def _session(workspace_id: int, scopes: frozenset[str]) -> RunSession:
    return RunSession(
        run_id="run-1",
        run_pk=1,
        lease_token="t",
        plugin_identity="langbot/qa-runner",
        scope=RunScope(workspace_id=workspace_id, workspace="w", runner_id="r", binding_id="b", conversation_id="c"),
        resources=AgentResources(storage=StorageResource(areas=["plugin"]), state=StateResource(enabled=True)),
        available_apis=ContextAPICapabilities(state=True, storage=True),
        state_enabled=True,
        state_scopes=scopes,
        run_token=TOKEN,
    )


@pytest.fixture
def handlers():
    workspace = WorkspaceFactory.create()
    session = _session(workspace.pk, frozenset({"conversation"}))
    far = timezone.now().timestamp() + 60
    lookup = {session.run_token: (session, far)}
    executor = DatabaseExecutor(1)
    yield proxy_handlers(sessions=lookup.get, db=executor)
    executor.shutdown()


async def _call(handlers, action: str, **data):
    frame = {"run_id": "run-1", "caller_plugin_identity": "langbot/qa-runner", "run_token": TOKEN, **data}
    return await handlers[action](frame, None)


async def test_proxy_refuses_unknown_runs_and_foreign_plugins(handlers):
    with pytest.raises(AgentAPIException) as unknown:
        await handlers["state_get"]({"run_id": "run-1", "scope": "conversation", "key": "k"}, None)
    assert unknown.value.code == "unauthorized"
    with pytest.raises(AgentAPIException) as other:
        await _call(handlers, "state_get", run_id="other", scope="conversation", key="k")
    assert other.value.code == "unauthorized"
    with pytest.raises(AgentAPIException) as foreign:
        await handlers["state_get"](
            {"run_id": "run-1", "caller_plugin_identity": "evil/plugin", "run_token": TOKEN, "scope": "conversation",
             "key": "k"},
            None,
        )
    assert foreign.value.code == "unauthorized"


async def test_proxy_refuses_state_scopes_outside_the_policy(handlers):
    with pytest.raises(AgentAPIException) as caught:
        await _call(handlers, "state_get", scope="runner", key="k")
    assert caught.value.code == "unauthorized"


async def test_proxy_serves_authorized_storage_and_refuses_the_rest(handlers):
    storage = await _call(handlers, "storage_get", area="plugin", key="k")
    assert storage == {"found": False, "value_base64": None}
    with pytest.raises(AgentAPIException) as workspace_area:
        await _call(handlers, "storage_get", area="workspace", key="k")
    assert workspace_area.value.code == "unauthorized"
    with pytest.raises(AgentAPIException) as bad:
        await _call(handlers, "state_set", scope="conversation", key="", value=1)
    assert bad.value.code == "invalid_argument"
