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
from gateway.envelope import EventEnvelopeIn
from gateway.services import EventIngestResult, event_ingest
from runners.models import Run
from tests.factories import BotFactory, ModelFactory, ModelProviderFactory, WorkspaceFactory
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
        "safety.rate-limit",
        "output.long-text-processing.strategy",
        "output.force-delay",
        "output.misc.exception-handling",
        "output.misc.remove-think",
        "trigger.access-control",  # its group ids, kept as written for an import not made for a QQ bot
    ]
    assert [note.split(":")[0].split("/")[0] for note in unmapped] == expected
    assert f"not mapped ({len(expected)}):" in printed
    assert all(f"  - {note}" in printed for note in unmapped)


@pytest.mark.django_db
def test_group_rules_that_cannot_reach_the_host_are_named(tmp_path, workspace, installed_runners):
    binding, _ = migrate(tmp_path, workspace.slug, fixture("langflow"))

    unmapped = json.loads(binding.source_detail)["unmapped"]
    assert binding.trigger_policy["group_patterns"] == [r"^(help|faq)\b"]
    assert any(
        note.startswith("trigger.group-respond-rules.prefix/regexp: the platform adapters forward only group")
        for note in unmapped
    )
    assert any(note.startswith("trigger.message-aggregation") for note in unmapped)
    assert any(note.startswith("safety.content-filter") for note in unmapped)


@pytest.mark.django_db
def test_trigger_rules_become_the_bindings_trigger_filter(tmp_path, workspace, installed_runners):
    binding, printed = migrate(tmp_path, workspace.slug, fixture("n8n"))

    policy = binding.trigger_policy
    assert (policy["access_mode"], policy["access_group_chat_ids"]) == ("allow", ["123456"])
    assert policy["access_private_user_ids"] == ["*"]
    assert (policy["ignore_prefixes"], policy["group_mention"]) == (["!"], True)
    assert 'trigger filter: {"ignore_prefixes": ["!"], "access_mode": "allow"' in printed


@pytest.mark.django_db
def test_an_import_for_a_qq_bot_names_group_chats_as_its_adapter_does(tmp_path, workspace, installed_runners):
    BotFactory.create(workspace=workspace, bot_id="qq-bot", platform="qq")

    binding, _ = migrate(tmp_path, workspace.slug, fixture("n8n"), "--bot", "qq-bot")

    assert binding.trigger_policy["access_group_chat_ids"] == ["group:123456"]
    assert not any(note.startswith("trigger.access-control") for note in json.loads(binding.source_detail)["unmapped"])


@pytest.mark.django_db
def test_group_rules_the_filter_cannot_hold_are_named_and_the_rest_kept(tmp_path, workspace, installed_runners):
    pipeline = fixture("langflow")
    pipeline["config"]["trigger"]["group-respond-rules"].update(
        {"at": False, "regexp": ["(unclosed", "^bot"], "random": 0.2}
    )
    pipeline["config"]["trigger"]["access-control"] = {"mode": "blacklist", "blacklist": ["channel_9", "person_7"]}

    binding, _ = migrate(tmp_path, workspace.slug, pipeline)

    policy = binding.trigger_policy
    assert (policy["group_mention"], policy["group_patterns"]) == (False, ["^bot"])
    assert (policy["access_mode"], policy["access_private_user_ids"]) == ("deny", ["7"])
    unmapped = json.loads(binding.source_detail)["unmapped"]
    assert "trigger.group-respond-rules.regexp: '(unclosed' is not a regular expression the host can run; dropped" in (
        unmapped
    )
    assert any(note.startswith("trigger.group-respond-rules.random") for note in unmapped)
    assert any(note.startswith("trigger.access-control.blacklist: 'channel_9'") for note in unmapped)


def group_event(binding: AgentBinding, text: str, *, mentioned: bool, event_id: str) -> EventIngestResult:
    """What the gateway makes of a group message (the shape the platform adapters send) to the binding."""
    envelope = EventEnvelopeIn.model_validate(
        {
            "event_id": event_id,
            "actor": {"actor_id": "user-7"},
            "input": {"text": text},
            "data": {"chat_id": "group-1", "chat_type": "group", "mentioned": mentioned},
        }
    )
    assert binding.workspace is not None
    return event_ingest(workspace=binding.workspace, envelope=envelope)


@pytest.mark.django_db
def test_a_migrated_group_prefix_rule_answers_a_prefixed_group_message_only(tmp_path, workspace, installed_runners):
    pipeline = fixture("local-agent")  # group rules: at, prefix "ai"
    pipeline["config"]["trigger"]["group-respond-rules"]["at"] = False
    binding, _ = migrate(tmp_path, workspace.slug, pipeline)

    prefixed = group_event(binding, "ai what is new?", mentioned=False, event_id="g-1")
    plain = group_event(binding, "what is new?", mentioned=True, event_id="g-2")

    assert [run.binding_id for run in prefixed.runs] == [binding.pk]
    assert prefixed.event.input["text"] == "what is new?"
    assert (plain.runs, plain.event.status) == ([], "no_binding")


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
def test_a_migrated_prefix_rule_answers_a_group_message_with_the_prefix_and_not_one_without(
    tmp_path, worker, installed_runners
):
    with fake_openai() as openai:
        openai.stream(answer("Nothing new ", "today"))
        workspace = WorkspaceFactory.create()
        provider = ModelProviderFactory.create(workspace=workspace, base_url=openai.base_url, max_retries=0)
        ModelFactory.create(workspace=workspace, provider=provider, model_id=LOCAL_AGENT_MODEL, name="gpt-fake")
        pipeline = fixture("local-agent")  # group rules: at, prefix "ai"
        pipeline["config"]["trigger"]["group-respond-rules"]["at"] = False
        binding, _ = migrate(tmp_path, workspace.slug, pipeline)

        without = group_event(binding, "what is new?", mentioned=True, event_id="g-plain")
        [run] = group_event(binding, "ai what is new?", mentioned=False, event_id="g-prefixed").runs
        run = wait_terminal(run, timeout=60)

    assert (without.runs, without.event.status) == ([], "no_binding")
    assert (run.status, run.output) == (Run.Status.COMPLETED, "Nothing new today"), run.error
    assert len(openai.requests) == 1
    assert openai.requests[0]["messages"][-1] == {"role": "user", "content": "what is new?"}


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
