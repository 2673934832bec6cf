"""A LangBot pipeline, as LangBot exports it (fixtures/langbot/*.json), migrated with `import_legacy_config`:
the binding gets the resource policy its runner's selections need, what the host cannot do is named in the
report, a runner that is not installed is refused — and the imported binding answers a message sent through
the gateway, through the real worker and plugin runtime (integration tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from bindings.models import AgentBinding
from runners.gateway.envelope import EventEnvelopeIn
from runners.gateway.services import event_ingest
from runners.models import Run
from tests.factories import ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes import langflow_server
from tests.fakes.langflow_server import fake_langflow
from tests.fakes.n8n_server import fake_n8n
from tests.fakes.openai_server import chunk, fake_openai
from tests.processes import wait_terminal

FIXTURES = Path(__file__).parent / "fixtures" / "langbot"
LOCAL_AGENT_MODEL = "7c9e6679-7425-40de-944b-e07fc1f90ae7"  # the model LangBot's pipeline selects, by uuid


def fixture(name: str, **block: Any) -> dict[str, Any]:
    """A fixture pipeline with its runner block's fields replaced by `block` (where the fakes listen)."""
    pipeline: dict[str, Any] = json.loads((FIXTURES / f"{name}-pipeline.json").read_text(encoding="utf-8"))
    ai = pipeline["config"]["ai"]
    ai[ai["runner"]["runner"]].update(block)
    return pipeline


def migrate(tmp_path: Path, workspace_slug: str, pipeline: dict[str, Any], *options: str) -> tuple[AgentBinding, str]:
    """The binding imported from `pipeline`, and what the command printed."""
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(pipeline, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out.txt"
    with out.open("w", encoding="utf-8") as stdout:
        call_command("import_legacy_config", str(path), "--workspace", workspace_slug, *options, stdout=stdout)
    return AgentBinding.objects.get(workspace__slug=workspace_slug, name=pipeline["name"]), out.read_text()


def message(binding: AgentBinding, text: str, *, conversation_id: str = "migrated-1") -> Run:
    """The run the gateway makes for a user's message in the binding's workspace."""
    envelope = EventEnvelopeIn.model_validate(
        {"conversation_id": conversation_id, "actor": {"actor_id": "user-7"}, "input": {"text": text}}
    )
    assert binding.workspace is not None
    result = event_ingest(workspace=binding.workspace, envelope=envelope)
    assert [run.binding_id for run in result.runs] == [binding.pk], result.event.status
    return result.runs[0]


# --- the import and its report (SQLite) --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_local_agent_pipeline_allows_the_model_it_selects(tmp_path, workspace, installed_runners):
    binding, printed = migrate(tmp_path, workspace.slug, fixture("local-agent"))

    assert binding.config_validated is True, binding.source_detail
    assert binding.resource_policy["allowed_model_ids"] == [LOCAL_AGENT_MODEL]
    assert binding.resource_policy["allowed_tool_names"] == ["*"]  # LangBot's enable-all-tools default
    assert binding.event_types == ["message.received"]
    assert f"resource policy allows: models {LOCAL_AGENT_MODEL}; tools *" in printed


@pytest.mark.django_db
def test_a_selected_model_the_workspace_lacks_is_named_in_the_report(tmp_path, workspace, installed_runners):
    _, printed = migrate(tmp_path, workspace.slug, fixture("local-agent"))

    assert f"model '{LOCAL_AGENT_MODEL}' is not in workspace '{workspace.slug}'" in printed


@pytest.mark.django_db
def test_a_local_agent_selecting_named_tools_knowledge_and_a_rerank_model_allows_exactly_those(
    tmp_path, workspace, installed_runners
):
    pipeline = fixture(
        "local-agent",
        model={"primary": "m-primary", "fallbacks": ["m-fallback", "m-primary"]},
        **{"rerank-model": "m-rerank", "knowledge-bases": ["kb-docs"], "enable-all-tools": False, "tools": ["time"]},
    )

    binding, _ = migrate(tmp_path, workspace.slug, pipeline)

    policy = binding.resource_policy
    assert policy["allowed_model_ids"] == ["m-primary", "m-fallback", "m-rerank"]
    assert (policy["allowed_kb_ids"], policy["allowed_tool_names"]) == (["kb-docs"], ["time"])


@pytest.mark.django_db
def test_what_the_host_cannot_do_is_named_in_the_report_and_kept_on_the_binding(tmp_path, workspace, installed_runners):
    binding, printed = migrate(tmp_path, workspace.slug, fixture("n8n"))

    unmapped = json.loads(binding.source_detail)["unmapped"]
    expected = [
        "ai.runner.expire-time",
        "trigger.access-control.whitelist",
        "trigger.ignore-rules.prefix",
        "safety.rate-limit",
        "output.long-text-processing.strategy",
        "output.force-delay",
        "output.misc.exception-handling",
        "output.misc.remove-think",
    ]
    assert [note.split(":")[0].split("/")[0] for note in unmapped] == expected
    assert f"not mapped ({len(expected)}):" in printed
    assert all(f"  - {note}" in printed for note in unmapped)


@pytest.mark.django_db
def test_group_rules_that_cannot_reach_the_host_are_named(tmp_path, workspace, installed_runners):
    binding, _ = migrate(tmp_path, workspace.slug, fixture("langflow"))

    unmapped = json.loads(binding.source_detail)["unmapped"]
    assert any(
        note.startswith("trigger.group-respond-rules.regexp: group messages that do not address") for note in unmapped
    )
    assert any(note.startswith("trigger.message-aggregation") for note in unmapped)
    assert any(note.startswith("safety.content-filter") for note in unmapped)


@pytest.mark.django_db
def test_a_pipeline_whose_runner_is_not_installed_is_refused_and_writes_nothing(tmp_path, workspace):
    with pytest.raises(CommandError, match=r"runner plugin:langbot/n8n-agent/default .* is not installed.*nothing was"):
        migrate(tmp_path, workspace.slug, fixture("n8n"))

    assert not AgentBinding.objects.exists()


@pytest.mark.django_db
def test_a_missing_runner_may_be_allowed_and_is_then_flagged(tmp_path, workspace):
    binding, printed = migrate(tmp_path, workspace.slug, fixture("n8n"), "--allow-missing-runner")

    assert binding.config_validated is False
    assert "runner: plugin:langbot/n8n-agent/default is not installed" in printed


# --- the imported binding answers (PostgreSQL, real worker and plugin runtime) ------------------------------


def answer(*parts: str) -> list[dict[str, Any]]:
    return [
        chunk({"role": "assistant", "content": parts[0]}),
        *[chunk({"content": part}) for part in parts[1:]],
        chunk({}, finish_reason="stop"),
    ]


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_migrated_local_agent_pipeline_answers_with_its_model(tmp_path, worker, installed_runners):
    with fake_openai() as openai:
        openai.stream(answer("Hello ", "from the migrated agent"))
        workspace = WorkspaceFactory.create()
        provider = ModelProviderFactory.create(workspace=workspace, base_url=openai.base_url, max_retries=0)
        ModelFactory.create(workspace=workspace, provider=provider, model_id=LOCAL_AGENT_MODEL, name="gpt-fake")
        binding, printed = migrate(tmp_path, workspace.slug, fixture("local-agent"))

        run = wait_terminal(message(binding, "hi"), timeout=60)

    assert "is not in workspace" not in printed
    assert (run.status, run.output) == (Run.Status.COMPLETED, "Hello from the migrated agent"), run.error
    request = openai.requests[-1]
    assert request["messages"][0]["content"].startswith("You are the support assistant of Example Corp.")
    assert request["messages"][-1] == {"role": "user", "content": "hi"}


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_migrated_n8n_chat_trigger_pipeline_answers(tmp_path, worker, installed_runners):
    with fake_n8n() as n8n:
        n8n.json({"output": "Hello from the n8n agent"})
        workspace = WorkspaceFactory.create()
        binding, _ = migrate(tmp_path, workspace.slug, fixture("n8n", **{"webhook-url": n8n.chat_url}))

        run = wait_terminal(message(binding, "hi"), timeout=60)

    assert (run.status, run.output) == (Run.Status.COMPLETED, "Hello from the n8n agent"), run.error
    assert n8n.requests[0]["chatInput"] == "hi"


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_migrated_langflow_pipeline_answers(tmp_path, worker, installed_runners):
    with fake_langflow() as langflow:
        langflow.reply("Hello from the flow", tokens=("Hello ", "from the flow"))
        workspace = WorkspaceFactory.create()
        block = {"base-url": langflow.base_url, "api-key": langflow_server.API_KEY}
        binding, _ = migrate(tmp_path, workspace.slug, fixture("langflow", **block))

        run = wait_terminal(message(binding, "hi"), timeout=60)

    assert (run.status, run.output) == (Run.Status.COMPLETED, "Hello from the flow"), run.error
    assert langflow.requests[0]["tweaks"] == {"ChatInput-xyz": {"should_store_message": True}}
