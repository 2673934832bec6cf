"""Resource builder (manifest ∩ policy ∩ config), state scope keys and the context builder."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bindings.models import RunnerDescriptor
from bindings.policies import ResourcePolicy, StatePolicy
from langbot_sdk.protocol import AgentRunnerContextPolicy, AgentRunnerPermissions, DynamicFormItemSchema
from resources.models import KnowledgeBase, MCPServer, MCPTool, Model
from runners.access.scope import RunScope
from runners.models import Run
from runners.orchestrator.context import context_build
from runners.orchestrator.resources import resources_build
from tests.factories import AgentBindingFactory, ModelFactory, RunnerDescriptorFactory, WorkspaceFactory
from transcripts.models import EventLog, StateEntry, TranscriptItem

SCHEMA = [
    DynamicFormItemSchema.model_validate({"name": "model", "label": "Model", "type": "llm-model-selector"}),
    DynamicFormItemSchema.model_validate({"name": "kbs", "label": "KBs", "type": "knowledge-base-multi-selector"}),
]


SERVER = MCPServer(server_id="files")
TOOLS = {
    name: MCPTool(tool_name=name, description=f"{name} things", parameters={"type": "object"}, server=SERVER)
    for name in ("search", "fetch")
}
KBS = {"kb1", "kb2"}


def _tools_read(names: list[str] | None) -> dict[str, MCPTool]:
    return {name: tool for name, tool in TOOLS.items() if names is None or name in names}


def _build(permissions: dict, policy: dict, config: dict, state: dict | None = None):
    return resources_build(
        permissions=AgentRunnerPermissions.model_validate(permissions),
        context_policy=AgentRunnerContextPolicy(),
        schema=SCHEMA,
        config=config,
        resource_policy=ResourcePolicy.model_validate(policy),
        state_policy=StatePolicy.model_validate(state or {}),
        models_read=lambda ids: {i: Model(model_id=i, name=i, kind="llm") for i in ids or ()},
        tools_read=_tools_read,
        knowledge_bases_read=lambda ids: {i: KnowledgeBase(kb_id=i, name=i.upper()) for i in ids or () if i in KBS},
    )


def test_resources_are_the_intersection_of_manifest_policy_and_config():
    resources, apis = _build(
        {
            "models": ["invoke"],
            "knowledge_bases": ["retrieve"],
            "storage": ["plugin", "workspace"],
            "history": ["page"],
        },
        {"allowed_model_ids": ["gpt-a"], "allowed_kb_ids": ["*"], "storage_areas": ["plugin", "binding"]},
        {"model": "gpt-a", "kbs": ["kb1", "kb2"]},
    )
    assert [(m.model_id, m.operations) for m in resources.models] == [("gpt-a", ["invoke"])]
    assert [kb.kb_id for kb in resources.knowledge_bases] == ["kb1", "kb2"]
    assert [str(a) for a in resources.storage.areas] == ["plugin"]
    assert apis.history_page is True
    assert apis.history_search is False
    assert apis.storage is True


def test_tools_are_the_policys_names_that_exist_in_the_workspace_with_their_schemas():
    resources, _ = _build({"tools": ["detail", "call"]}, {"allowed_tool_names": ["fetch", "gone"]}, {})
    assert [(t.tool_name, t.description, t.parameters, t.source, t.operations) for t in resources.tools] == [
        ("fetch", "fetch things", {"type": "object"}, "mcp:files", ["detail", "call"])
    ]


def test_the_tool_wildcard_grants_every_tool_of_the_workspace():
    resources, _ = _build({"tools": ["call"]}, {"allowed_tool_names": ["*"]}, {})
    assert sorted(t.tool_name for t in resources.tools) == ["fetch", "search"]


def test_a_selected_knowledge_base_that_does_not_exist_is_not_a_resource():
    resources, _ = _build(
        {"knowledge_bases": ["retrieve"]}, {"allowed_kb_ids": ["kb1", "kb9"]}, {"kbs": ["kb9", "kb1"]}
    )
    assert [(kb.kb_id, kb.name) for kb in resources.knowledge_bases] == [("kb1", "KB1")]


def test_a_model_the_policy_does_not_allow_is_not_a_resource():
    resources, _ = _build({"models": ["invoke"]}, {"allowed_model_ids": ["other"]}, {"model": "gpt-a"})
    assert resources.models == []


def test_without_manifest_permission_nothing_is_granted():
    resources, apis = _build({}, {"allowed_model_ids": ["*"], "allowed_tool_names": ["search"]}, {"model": "gpt-a"})
    assert resources.models == []
    assert resources.tools == []
    assert resources.storage.areas == []
    assert apis.storage is False


def test_disabled_state_policy_closes_the_state_api():
    resources, apis = _build({}, {}, {}, state={"enable_state": False})
    assert resources.state.enabled is False
    assert apis.state is False


def test_state_keys_are_isolated_per_runner_binding_and_conversation():
    scope = RunScope(workspace_id=1, workspace="w", runner_id="plugin:a/b/c", binding_id="bind", conversation_id="c:1")
    key = scope.state_key("conversation")
    assert key == "conversation:plugin%3Aa/b/c:bind:c%3A1"
    threaded = RunScope(**{**scope.as_dict(), "conversation_id": "c", "thread_id": "1"})
    assert threaded.state_key("conversation") != key
    other_binding = RunScope(**{**scope.as_dict(), "binding_id": "other"})
    assert other_binding.state_key("conversation") != key
    assert scope.state_key("actor") is None
    assert scope.state_key("runner") == "runner:plugin%3Aa/b/c:bind"
    long = RunScope(**{**scope.as_dict(), "conversation_id": "x" * 800})
    assert len(long.state_key("conversation") or "") <= 700


def _run_with_history(prior: int, *, context_policy: dict | None = None):
    workspace = WorkspaceFactory.create()
    plugin = f"ctx-{workspace.pk}"
    manifest = {
        "id": f"plugin:tester/{plugin}/default",
        "name": "default",
        "label": {"en_US": "ctx"},
        "permissions": {"history": ["page"]},
        "context": context_policy or {},
    }
    descriptor = RunnerDescriptorFactory.create(
        context_policy=context_policy or {},
        manifest=manifest,
        plugin_name=plugin,
        manifest_sha256=hashlib.sha256(json.dumps(manifest).encode()).hexdigest(),
    )
    binding = AgentBindingFactory.create(workspace=workspace, runner_id=descriptor.runner_id)
    TranscriptItem.objects.bulk_create(
        TranscriptItem(
            workspace=workspace, conversation_id="c", role="user" if i % 2 == 0 else "assistant", content=f"m{i}"
        )
        for i in range(prior)
    )
    event = EventLog.objects.create(
        workspace=workspace, event_id="e1", event_type="message.received", source="api", conversation_id="c",
        actor={"actor_type": "user", "actor_id": "u1"}, input={"text": "now"},
    )  # fmt: skip
    current = TranscriptItem.objects.create(
        workspace=workspace, conversation_id="c", role="user", content="now", event=event
    )
    run = Run.objects.create(
        workspace=workspace, event=event, binding=binding, binding_key=binding.binding_id,
        runner_id=descriptor.runner_id, conversation_id="c",
    )  # fmt: skip
    StateEntry.objects.create(
        workspace=workspace, scope="conversation", key="k", value={"v": 1},
        scope_key=RunScope(workspace_id=workspace.pk, workspace=workspace.slug, runner_id=run.runner_id,
                           binding_id=run.binding_key, conversation_id="c").state_key("conversation") or "",
    )  # fmt: skip
    built = context_build(
        run=run, event=event, binding=binding, descriptor=descriptor, deadline_at=timezone.now() + timedelta(seconds=60)
    )
    return built, current


@pytest.mark.django_db
def test_context_carries_cursors_and_state_but_no_history():
    built, current = _run_with_history(5)
    ctx = built.context
    assert ctx.bootstrap is None
    assert ctx.context.inline_policy.mode == "current_event"
    assert ctx.context.has_history_before is True
    newest_before = TranscriptItem.objects.filter(id__lt=current.id).order_by("-id").first()
    assert newest_before is not None
    assert ctx.context.latest_cursor == str(newest_before.id)
    assert ctx.context.transcript_seq == current.id
    assert ctx.input.text == "now"
    assert ctx.state.conversation == {"k": {"v": 1}}
    assert ctx.actor is not None
    assert ctx.actor.actor_id == "u1"
    assert built.session.authorization()["scope"]["conversation_id"] == "c"


@pytest.mark.django_db
def test_first_message_has_no_history_before():
    built, _ = _run_with_history(0)
    assert built.context.context.has_history_before is False
    assert built.context.context.latest_cursor is None


@pytest.mark.django_db
def test_recent_tail_bootstrap_is_bounded_by_events_and_bytes():
    built, _ = _run_with_history(
        10, context_policy={"bootstrap": "recent_tail", "max_inline_events": 4, "max_inline_bytes": 1000}
    )
    ctx = built.context
    assert ctx.bootstrap is not None
    assert [m.content for m in ctx.bootstrap.messages] == ["m6", "m7", "m8", "m9"]
    assert ctx.context.inline_policy.mode == "recent_tail"
    assert ctx.context.inline_policy.delivered_count == 4
    assert ctx.context.inline_policy.messages_complete is False

    by_bytes, _ = _run_with_history(
        10, context_policy={"bootstrap": "recent_tail", "max_inline_events": 50, "max_inline_bytes": 5}
    )
    assert by_bytes.context.bootstrap is not None
    assert [m.content for m in by_bytes.context.bootstrap.messages] == ["m8", "m9"]


@pytest.mark.django_db
def test_descriptor_factory_default_status_is_available():
    assert RunnerDescriptorFactory.create().status == RunnerDescriptor.Status.AVAILABLE


def _model_run(workspace, *, config: dict, policy: dict):
    schema = [{"name": "model", "label": "Model", "type": "llm-model-selector"},
              {"name": "fallbacks", "label": "Fallbacks", "type": "llm-model-selector"}]  # fmt: skip
    plugin = f"models-{workspace.pk}"
    manifest = {
        "id": f"plugin:tester/{plugin}/default",
        "name": "default",
        "label": {"en_US": "models"},
        "config_schema": schema,
        "permissions": {"models": ["invoke", "stream"]},
    }
    descriptor = RunnerDescriptorFactory.create(
        plugin_name=plugin, manifest=manifest, config_schema=schema,
        manifest_sha256=hashlib.sha256(json.dumps(manifest).encode()).hexdigest(),
    )  # fmt: skip
    binding = AgentBindingFactory.create(
        workspace=workspace, runner_id=descriptor.runner_id, runner_config=config, resource_policy=policy
    )
    event = EventLog.objects.create(
        workspace=workspace, event_id="e-models", event_type="message.received", source="api", conversation_id="c",
        input={"text": "now"},
    )  # fmt: skip
    TranscriptItem.objects.create(workspace=workspace, conversation_id="c", role="user", content="now", event=event)
    run = Run.objects.create(
        workspace=workspace, event=event, binding=binding, binding_key=binding.binding_id,
        runner_id=descriptor.runner_id, conversation_id="c",
    )  # fmt: skip
    return run, event, binding, descriptor


@pytest.mark.django_db
def test_snapshot_models_are_the_workspace_rows_with_their_kind_and_abilities():
    workspace = WorkspaceFactory.create()
    ModelFactory.create(
        workspace=workspace, provider__workspace=workspace, model_id="chat", name="gpt-4o",
        supports_tools=True, supports_vision=True, context_window=128000, max_output_tokens=4096,
    )  # fmt: skip
    ModelFactory.create(workspace=workspace, provider__workspace=workspace, model_id="embed", kind="embedding")
    ModelFactory.create(model_id="elsewhere")  # another workspace's row with the same kind of id
    run, event, binding, descriptor = _model_run(
        workspace,
        config={"model": "chat", "fallbacks": ["embed", "missing", "elsewhere"]},
        policy={"allowed_model_ids": ["*"]},
    )

    built = context_build(
        run=run, event=event, binding=binding, descriptor=descriptor, deadline_at=timezone.now() + timedelta(seconds=60)
    )

    models = built.session.resources.models
    assert [(m.model_id, m.kind) for m in models] == [("chat", "llm"), ("embed", "embedding")]
    chat = models[0]
    assert (chat.supports_tools, chat.supports_vision, chat.context_window) == (True, True, 128000)
    assert chat.metadata == {"max_output_tokens": 4096}
    assert built.session.resources.find_model("missing") is None


@pytest.mark.django_db
def test_a_binding_allowing_no_model_reads_no_model_rows():
    # (An unset selector narrows nothing — it means what the binding allows — so here the binding allows none.)
    workspace = WorkspaceFactory.create()
    run, event, binding, descriptor = _model_run(workspace, config={}, policy={"allowed_model_ids": []})

    with CaptureQueriesContext(connection) as queries:
        context_build(
            run=run, event=event, binding=binding, descriptor=descriptor,
            deadline_at=timezone.now() + timedelta(seconds=60),
        )  # fmt: skip

    assert not [q for q in queries.captured_queries if Model._meta.db_table in q["sql"]]
