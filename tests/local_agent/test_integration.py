"""The local-agent through the real worker and plugin runtime, against a local OpenAI-compatible server:
a reply streams, a second turn sees the first through history paging, cancelling a run mid-stream
closes the provider's connection, and a knowledge base the binding allows is cited though the agent's own
field picks none (the README's walk)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tenacity import Retrying, stop_after_delay, wait_fixed

from runners.lifecycle.services import run_cancel_request
from runners.models import Run, RunEvent
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import AgentBindingFactory, ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, chunk, fake_openai
from tests.local_agent.plugin import RUNNER_ID
from tests.processes import post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@pytest.fixture
def local_agent_binding(worker, qa_report, fake):
    assert RUNNER_ID in [m.id for m in qa_report.runners], "the runtime did not load plugins/local-agent"
    runner_descriptors_sync(report=qa_report)
    workspace = WorkspaceFactory.create()
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", name="gpt-fake", supports_tools=True)
    return AgentBindingFactory.create(
        workspace=workspace,
        runner_id=RUNNER_ID,
        runner_config={"model": "m1", "prompt": [{"role": "system", "content": "You are terse."}]},
        resource_policy={"allowed_model_ids": ["m1"]},
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
        delivery_policy={"enable_reply": True, "enable_streaming": True},
    )


def answer(*parts: str) -> list[dict]:
    return [
        chunk({"role": "assistant", "content": parts[0]}),
        *[chunk({"content": part}) for part in parts[1:]],
        chunk({}, finish_reason="stop"),
        chunk(usage={"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}),
    ]


def test_a_chat_with_the_local_agent_streams_its_reply(local_agent_binding, fake):
    fake.stream(answer("Hel", "lo", " Ada"))

    run = wait_terminal(post_message(local_agent_binding, "hi, I am Ada", conversation_id="la-1"), timeout=60)

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.output == "Hello Ada"
    events = list(RunEvent.objects.filter(run=run).values_list("type", "data"))
    deltas = "".join(data["chunk"]["content"] for type_, data in events if type_ == "message.delta")
    assert deltas == "Hello Ada"
    assert [t for t, _ in events][-2:] == ["message.completed", "run.completed"]
    request = fake.requests[-1]
    assert request["stream"] is True
    assert request["messages"][0] == {"role": "system", "content": "You are terse."}
    assert request["messages"][-1] == {"role": "user", "content": "hi, I am Ada"}


def test_the_second_turn_sees_the_first_through_history_paging(local_agent_binding, fake):
    fake.stream(answer("Nice to meet you, Ada."))
    first = wait_terminal(post_message(local_agent_binding, "my name is Ada", conversation_id="la-2"), timeout=60)
    assert first.status == Run.Status.COMPLETED, first.error

    fake.stream(answer("Your name is Ada."))
    second = wait_terminal(post_message(local_agent_binding, "what is my name?", conversation_id="la-2"), timeout=60)

    assert second.status == Run.Status.COMPLETED, second.error
    assert second.output == "Your name is Ada."
    assert fake.requests[-1]["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "what is my name?"},
    ]
    history = RunEvent.objects.get(run=second, type="run.completed").data["metadata"]["history"]
    assert history["items_read"] == 2


def test_cancelling_a_run_mid_stream_closes_the_providers_connection_at_once(local_agent_binding, fake):
    # The provider sends one chunk and then nothing, for up to 10 s, watching for the client to go; the
    # local-agent would wait 120 s (its `timeout`) for the next chunk.
    fake.stall(chunk({"role": "assistant", "content": "Let me think"}))
    run = post_message(local_agent_binding, "a long question", conversation_id="la-3")
    assert fake.first_chunk_sent.wait(30), "the provider was never called"
    # Mid-stream: the first chunk has reached the run's events (on a loaded machine it may still be on its way
    # when the provider has sent it).
    for attempt in Retrying(stop=stop_after_delay(30), wait=wait_fixed(0.05), reraise=True):
        with attempt:
            assert RunEvent.objects.filter(run=run, type="message.delta").exists()

    run_cancel_request(run=run, reason="user pressed stop")

    assert fake.disconnected.wait(5), "the provider's stream stayed open after the cancel"
    run = wait_terminal(run, timeout=30)
    assert run.status == Run.Status.CANCELLED, (run.status, run.error)
    events = RunEvent.objects.filter(run=run).values_list("type", "data")
    assert [data["chunk"]["content"] for type_, data in events if type_ == "message.delta"] == ["Let me think"]


def test_the_readme_walk_a_knowledge_base_allowed_in_the_binding_is_cited_without_being_picked(
    local_agent_binding, fake, monkeypatch
):
    # README: "add ... a knowledge base and allow it in the binding, and the agent ... cites its documents".
    # The local agent's own knowledge-base field stays empty; the binding's policy alone allows the base.
    from django.core.files.uploadedfile import SimpleUploadedFile

    from resources.knowledge.ingestion import knowledge_document_ingest
    from resources.knowledge.services import knowledge_document_upload
    from resources.models import KnowledgeBase
    from resources.tasks import knowledge_document_ingest as ingest_task

    monkeypatch.setattr(ingest_task, "delay", lambda document_id: None)  # ingested here, not by a worker
    workspace = local_agent_binding.workspace
    kb = KnowledgeBase.objects.create(workspace=workspace, kb_id="manual", name="Coffee machine manual")
    upload = SimpleUploadedFile("manual.txt", b"To descale the coffee machine, run the descale cycle twice.")
    document = knowledge_document_upload(knowledge_base=kb, file=upload, name="manual.txt", mime_type="", metadata=None)
    knowledge_document_ingest(document_id=str(document.document_id))
    local_agent_binding.resource_policy = {"allowed_model_ids": ["m1"], "allowed_kb_ids": ["manual"]}
    local_agent_binding.save()
    fake.stream(answer("Run the descale cycle twice [1]."))

    run = wait_terminal(post_message(local_agent_binding, "how do I descale the coffee machine?"), timeout=60)

    assert run.status == Run.Status.COMPLETED, run.error
    assert "knowledge-bases" not in local_agent_binding.runner_config
    prompt = "\n".join(str(m["content"]) for m in fake.requests[-1]["messages"])
    assert "run the descale cycle twice" in prompt
    citations = RunEvent.objects.get(run=run, type="run.completed").data["metadata"]["citations"]
    assert [c["kb_id"] for c in citations] == ["manual"]
    assert citations[0]["document_name"] == "manual.txt"
