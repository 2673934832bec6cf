"""One trace per run, from the chat message to the model call and the reply (docs/tracing.md): a Telegram update
posted to a real daphne becomes a run on a real worker and plugin runtime (the test-only model-caller runner, which
calls its model whole and then streamed), and the web process and the worker export their spans over OTLP/HTTP to a
local collector (tests/fakes/otlp_collector.py). Both processes are this test's own, on a queue of their own, with
the standard `OTEL_*` variables set; the test session's shared worker is not traced."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from langbot_sdk.protocol import ListAgentRunnersResponse
from langbot_sdk.runtime.loader import load_plugins
from platforms.models import PlatformDelivery
from runners.models import Run
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import AgentBindingFactory, BotFactory, ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.openai_server import FakeOpenAI, chunk, completion, fake_openai
from tests.fakes.otlp_collector import CollectedSpan, FakeCollector, serving_collector
from tests.fakes.platform_http import serving
from tests.fakes.telegram_server import BOT_USERNAME, TOKEN, FakeTelegram
from tests.processes import TEST_PLUGINS_DIR, post_message, wait_terminal

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MODEL_CALLER_ID = "plugin:langbot-tests/model-caller/default"
SECRET = "trace-webhook-secret"
SERVER, CLIENT = 2, 3  # OTLP span kinds


@pytest.fixture
def collector() -> Iterator[FakeCollector]:
    with serving_collector() as server:
        yield server


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    with serving(FakeTelegram()) as server:
        yield server


@pytest.fixture
def host_with(start_web, start_worker, collector: FakeCollector) -> Iterator[Callable[..., HostProcesses]]:
    """Start a web process and a worker whose OTLP endpoint is the collector (and any other `OTEL_*` variables),
    on a queue no other worker reads; both are stopped (their spans flushed) by `stop()` or at the end."""
    started: list[HostProcesses] = []

    def start(**otel: str) -> HostProcesses:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_SERVICE_NAME": "langbot-host-test",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "CELERY_TASK_DEFAULT_QUEUE": f"langbot-traced-{uuid.uuid4().hex[:8]}",
            **otel,
        }
        processes = HostProcesses(start_web(**env), start_worker(**env), env["CELERY_TASK_DEFAULT_QUEUE"])
        started.append(processes)
        return processes

    yield start
    for processes in started:
        processes.stop()


@dataclass
class HostProcesses:
    web: Any
    worker: Any
    queue: str

    @property
    def url(self) -> str:
        return str(self.web.url)

    def stop(self) -> None:
        self.worker.stop()
        self.web.stop()


@pytest.fixture
def model_caller_bot(qa_report, fake: FakeOpenAI, fake_telegram: FakeTelegram) -> Any:
    """A Telegram bot whose binding's runner calls its model whole, then streamed (the fake answers both)."""
    plugins = load_plugins([TEST_PLUGINS_DIR])
    runner_descriptors_sync(
        report=ListAgentRunnersResponse(
            runners=[*qa_report.runners, *plugins.manifests], plugins=[*qa_report.plugins, *plugins.reports]
        )
    )
    workspace = WorkspaceFactory.create()
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", name="gpt-fake")
    AgentBindingFactory.create(
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
    return BotFactory.create(
        workspace=workspace,
        platform="telegram",
        credentials={
            "token": TOKEN,
            "secret_token": SECRET,
            "api_base_url": fake_telegram.origin,
            "username": BOT_USERNAME,
        },
    )


def _message_answered(host: HostProcesses, bot: Any, fake_telegram: FakeTelegram) -> Run:
    """Post a user's message to the bot's webhook; the run, once it completed and its reply was delivered."""
    answer = httpx.post(
        f"{host.url}/platforms/telegram/{bot.workspace.slug}/{bot.bot_id}/webhook",
        json=fake_telegram.message_update("hello", chat_id=8181),
        headers={"X-Telegram-Bot-Api-Secret-Token": SECRET},
        timeout=30,
    )
    assert answer.status_code == 200
    run = _run_of(bot)
    assert run.status == Run.Status.COMPLETED, run.error
    deadline = time.monotonic() + 30
    while not PlatformDelivery.objects.filter(run=run, status="delivered").exists():
        assert time.monotonic() < deadline, "the reply was not delivered"
        time.sleep(0.05)
    return run


def _run_of(bot: Any, timeout: float = 30) -> Run:
    deadline = time.monotonic() + timeout
    while (run := Run.objects.filter(bot=bot).first()) is None:
        assert time.monotonic() < deadline, "no run was created"
        time.sleep(0.05)
    return wait_terminal(run, timeout=60)


def _one(spans: list[CollectedSpan], matches: Callable[[CollectedSpan], bool]) -> CollectedSpan:
    found = [s for s in spans if matches(s)]
    assert len(found) == 1, [(s.name, s.attributes) for s in spans]
    return found[0]


def _named(spans: list[CollectedSpan], name: str) -> CollectedSpan:
    return _one(spans, lambda s: s.name == name)


def test_a_platform_message_yields_one_trace_from_the_webhook_to_the_model_calls_and_the_reply(
    host_with, model_caller_bot, collector: FakeCollector, fake: FakeOpenAI, fake_telegram: FakeTelegram
):
    # given a web process and a worker that export traces
    host = host_with()

    # when a user's message reaches the webhook, and the run answers it
    run = _message_answered(host, model_caller_bot, fake_telegram)
    assert len(run.trace_id) == 32
    assert int(run.trace_id, 16)

    # and the collector holds one trace, the run's, from the inbound request to the delivery
    wanted = {"gateway.ingest", "run.dispatch", "run.queue_wait", "run.admission", "run.execute", "platform.deliver"}
    collector.wait_for(lambda c: wanted <= {s.name for s in c.of_trace(run.trace_id)} and _chats(c, run) == 2)
    spans = collector.of_trace(run.trace_id)
    by_id = {s.span_id: s for s in spans}

    inbound = _one(spans, lambda s: s.kind == SERVER and s.resource.get("langbot.process") == "web")
    assert inbound.parent_span_id == ""  # the trace starts at the webhook request
    ingest = _named(spans, "gateway.ingest")
    dispatch = _named(spans, "run.dispatch")
    queue_wait = _named(spans, "run.queue_wait")
    admission = _named(spans, "run.admission")
    execute = _named(spans, "run.execute")
    runtime = _named(spans, "runtime.run_agent")
    deliver = _named(spans, "platform.deliver")
    assert ingest.parent_span_id == inbound.span_id
    assert dispatch.parent_span_id == ingest.span_id
    assert dispatch.attributes["langbot.run_id"] == str(run.run_id)
    for worker_span in (queue_wait, admission, execute):
        assert worker_span.parent_span_id == dispatch.span_id
        assert worker_span.resource["langbot.process"] == "worker"
    assert queue_wait.start_ns <= queue_wait.end_ns <= admission.start_ns <= admission.end_ns <= execute.start_ns
    assert runtime.parent_span_id == execute.span_id
    assert deliver.parent_span_id == execute.span_id

    # each proxy call is a span of the run, and each model call below it has the GenAI attributes with its tokens
    invoke = _named(spans, "invoke_llm")
    stream = _named(spans, "invoke_llm_stream")
    assert invoke.parent_span_id == execute.span_id
    assert stream.parent_span_id == execute.span_id
    assert invoke.attributes["langbot.proxy.outcome"] == "ok"
    chats = sorted((s for s in spans if s.name == "chat gpt-fake"), key=lambda s: s.start_ns)
    assert [by_id[s.parent_span_id].name for s in chats] == ["invoke_llm", "invoke_llm_stream"]
    assert [(s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"]) for s in chats] == [
        (7, 2),
        (4, 3),
    ]
    assert {s.attributes["gen_ai.request.model"] for s in chats} == {"gpt-fake"}
    assert {s.attributes["gen_ai.operation.name"] for s in chats} == {"chat"}
    assert {s.attributes["langbot.model_id"] for s in chats} == {"m1"}

    # and the model provider was told the trace: each request's traceparent names its model call's span
    parents = [h.get("traceparent", "") for h in fake.headers]
    assert [p.split("-")[1:3] for p in parents] == [[run.trace_id, s.span_id] for s in chats]

    # and so was Telegram: the reply's API calls carried the run's trace, from an HTTP client span of the delivery
    assert fake_telegram.traceparents
    assert {p.split("-")[1] for p in fake_telegram.traceparents} == {run.trace_id}
    client_span_ids = {p.split("-")[2] for p in fake_telegram.traceparents}
    for span_id in client_span_ids:
        assert by_id[span_id].kind == CLIENT
        assert _ancestors(by_id, by_id[span_id]) >= {deliver.span_id}


def _chats(collector: FakeCollector, run: Run) -> int:
    return sum(1 for s in collector.of_trace(run.trace_id) if s.name == "chat gpt-fake")


def _ancestors(by_id: dict[str, CollectedSpan], span: CollectedSpan) -> set[str]:
    seen: set[str] = set()
    while span.parent_span_id in by_id:
        seen.add(span.parent_span_id)
        span = by_id[span.parent_span_id]
    return seen


def test_a_run_sent_from_outside_any_trace_is_still_one_trace_the_runs_own(
    host_with, qa_binding, collector: FakeCollector
):
    # given a traced worker, and a run created and sent by a process that does not trace (as the sweeper re-sends)
    from langbot_host.celery import app

    host = host_with()
    binding = qa_binding()
    previous, app.conf.task_default_queue = app.conf.task_default_queue, host.queue
    try:
        # when the worker runs it
        run = wait_terminal(post_message(binding, "qa:ok hi"), timeout=60)
    finally:
        app.conf.task_default_queue = previous
    assert run.status == Run.Status.COMPLETED, run.error

    # then its spans are one trace, the run's, rooted at a `run` span of the worker
    wanted = {"run", "run.queue_wait", "run.admission", "run.execute", "runtime.run_agent"}
    collector.wait_for(lambda c: wanted <= {s.name for s in c.of_trace(run.trace_id)})
    spans = collector.of_trace(run.trace_id)
    root = _named(spans, "run")
    assert root.parent_span_id == ""
    assert root.attributes["langbot.run_id"] == str(run.run_id)
    for name in ("run.queue_wait", "run.admission", "run.execute"):
        assert _named(spans, name).parent_span_id == root.span_id
    assert _named(spans, "runtime.run_agent").parent_span_id == _named(spans, "run.execute").span_id
    assert not [s for s in spans if s.name in ("gateway.ingest", "run.dispatch")]


def test_with_the_sdk_disabled_nothing_is_exported_and_no_traceparent_is_sent(
    host_with, model_caller_bot, collector: FakeCollector, fake: FakeOpenAI, fake_telegram: FakeTelegram
):
    # given processes whose endpoint is set but whose SDK is disabled
    host = host_with(OTEL_SDK_DISABLED="true")

    # when a message is answered, and both processes stop (which would flush any span they held)
    run = _message_answered(host, model_caller_bot, fake_telegram)
    host.stop()

    # then the run still has a trace id of its own, but nothing was exported and no request carried a traceparent
    assert len(run.trace_id) == 32
    assert collector.requests == 0
    assert len(fake.headers) == 2
    assert all("traceparent" not in headers for headers in fake.headers)
    assert fake_telegram.calls_of("sendMessage")
    assert fake_telegram.traceparents == []
    assert "tracing: exporting" not in host.worker.log()
