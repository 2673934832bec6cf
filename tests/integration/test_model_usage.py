"""The token usage of a run's model calls, counted by the host, is stored with the run and shown in the
run detail — through a real worker and plugin runtime, with a test-only runner (tests/plugins/model-caller)
that calls a local OpenAI-compatible server twice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langbot_sdk.protocol import ListAgentRunnersResponse
from langbot_sdk.runtime.loader import load_plugins
from runners.models import Run
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import AgentBindingFactory, ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, chunk, completion, fake_openai
from tests.processes import TEST_PLUGINS_DIR, post_message, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

MODEL_CALLER_ID = "plugin:langbot-tests/model-caller/default"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


def test_a_run_that_calls_its_model_twice_stores_both_calls_usage_beside_the_runners(
    worker, qa_report, fake, api_client_for
):
    # given a binding of a runner that calls its model whole, then streamed
    plugins = load_plugins([TEST_PLUGINS_DIR])
    runner_descriptors_sync(
        report=ListAgentRunnersResponse(
            runners=[*qa_report.runners, *plugins.manifests], plugins=[*qa_report.plugins, *plugins.reports]
        )
    )
    workspace = WorkspaceFactory.create()
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", name="gpt-fake")
    binding = AgentBindingFactory.create(
        workspace=workspace,
        runner_id=MODEL_CALLER_ID,
        runner_config={"model": "m1"},
        resource_policy={"allowed_model_ids": ["m1"]},
    )
    fake.reply(completion("one", usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}))
    fake.stream(
        [
            chunk({"role": "assistant", "content": "two"}),
            chunk({}, finish_reason="stop"),
            chunk(usage={"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}),
        ]
    )

    # when a message arrives
    run = wait_terminal(post_message(binding, "hi"), timeout=60)

    # then the run keeps the runner's usage and adds the host's sum of both calls, shown in the run detail
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.output == "one|two"
    host = {
        "models": {"m1": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16, "calls": 2}},
        "prompt_tokens": 11,
        "completion_tokens": 5,
        "total_tokens": 16,
    }
    assert run.usage == {"reported_by": "runner", "host": host}
    detail = api_client_for(workspace).get(f"/api/v1/runs/{run.run_id}")
    assert detail.status_code == 200
    assert detail.json()["usage"] == {"reported_by": "runner", "host": host}
