"""Cost and budgets end to end — REST, a real worker and plugin runtime, and the test-only runner that calls
its model whole, then streamed (tests/plugins/model-caller): a budget set through REST lets the first call
through, refuses the second with `quota_exceeded` (recorded on the run), and keeps the next run from
starting, with a `run.failed` result saying so; the run's cost, the day's spend and the budget's `spent`
agree."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

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
# 1000 prompt + 500 completion tokens at 2 / 8 per million: 0.006.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


def test_a_budget_stops_model_calls_and_then_runs_and_every_figure_agrees(worker, qa_report, fake, api_client_for):
    # given a priced model, a binding of the model-caller runner and a daily workspace budget of one call
    plugins = load_plugins([TEST_PLUGINS_DIR])
    runner_descriptors_sync(
        report=ListAgentRunnersResponse(
            runners=[*qa_report.runners, *plugins.manifests], plugins=[*qa_report.plugins, *plugins.reports]
        )
    )
    workspace = WorkspaceFactory.create()
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(
        workspace=workspace,
        provider=provider,
        model_id="m1",
        input_price_per_million=Decimal(2),
        output_price_per_million=Decimal(8),
    )
    binding = AgentBindingFactory.create(
        workspace=workspace,
        runner_id=MODEL_CALLER_ID,
        runner_config={"model": "m1"},
        resource_policy={"allowed_model_ids": ["m1"]},
    )
    api = api_client_for(workspace)
    created = api.post("/api/v1/budgets", {"amount": "0.006", "period": "day", "name": "one call"}, format="json")
    assert created.status_code == 201, created.content
    fake.reply(completion("one", usage=USAGE))
    fake.stream([chunk({"role": "assistant", "content": "two"}), chunk({}, finish_reason="stop"), chunk(usage=USAGE)])

    # when a message arrives: the whole call goes through and uses the budget up; the streamed one is refused
    first = wait_terminal(post_message(binding, "hi"), timeout=60)

    assert first.status == Run.Status.FAILED
    assert len(fake.requests) == 1
    host = first.usage["host"]
    assert (host["cost"], host["currency"]) == ("0.006", "USD")
    assert host["quota_exceeded"]["budget_id"] == created.json()["budget_id"]
    assert "daily model budget of this workspace is used up" in host["quota_exceeded"]["message"]
    assert api.get(f"/api/v1/runs/{first.run_id}").json()["usage"]["host"]["cost"] == "0.006"

    # when the next message arrives, its run does not start, and says why
    second = wait_terminal(post_message(binding, "again"), timeout=60)

    assert second.status == Run.Status.FAILED
    assert second.status_reason == "quota_exceeded"
    assert second.started_at == second.finished_at
    assert second.error["code"] == "quota_exceeded"
    assert "resets at" in second.error["message"]
    assert second.error["details"]["spent"] == "0.006"
    events = api.get(f"/api/v1/runs/{second.run_id}/events").json()["items"]
    assert [(e["type"], e["data"]["code"]) for e in events] == [("run.failed", "quota_exceeded")]
    assert len(fake.requests) == 1

    # and REST shows the same figures: the budget's spent, the day's cost
    budget = api.get(f"/api/v1/budgets/{created.json()['budget_id']}").json()
    assert (budget["spent"], budget["amount"], budget["currency"]) == ("0.006", "0.006", "USD")
    costs = api.get("/api/v1/costs?group_by=actor").json()
    assert [(i["cost"], i["calls"], i["prompt_tokens"]) for i in costs["items"]] == [("0.006", 1, 1000)]
