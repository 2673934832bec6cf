"""The local-agent end to end, through the real processes: daphne for the REST calls, the Celery worker
and its plugin runtime for the runs, the fake OpenAI-compatible provider (tests/fakes/openai_server.py)
and the real fake MCP server over stdio (tests/fakes/mcp_server.py).

- the README's walkthrough ("An LLM agent in a few lines"), its curl bodies read from README.md itself;
- a run that calls an MCP tool the model asked for in fragments, the result reaching the model;
- a run that cites a chunk of a document uploaded over REST and ingested by the worker;
- a 40-turn conversation in a 1500-token window: every request within budget, summaries made, and the
  checkpoint in conversation state and in the runs' events.
"""

from __future__ import annotations

import io
import json
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from bindings.models import AgentBinding, Workspace
from bindings.services import api_key_create
from langbot_sdk.protocol import Message
from resources.models import KnowledgeChunk
from resources.tokens import token_count
from runtimes.descriptors import runner_descriptors_sync
from tests.factories import AgentBindingFactory, BotFactory, WorkspaceFactory
from tests.fakes.mcp_fixtures import SERVER_SCRIPT
from tests.fakes.openai_server import Answer, FakeOpenAI, chunk, completion, fake_openai, replied, streamed
from tests.processes import WebProcess
from transcripts.models import StateEntry

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RUNNER_ID = "plugin:langbot/local-agent/default"
README = Path(__file__).resolve().parents[2] / "README.md"
README_HOST = "http://127.0.0.1:8000"
SUMMARY_PROMPT_START = "You keep a running summary"
CHECKPOINT_KEY = "local-agent.checkpoint"
USAGE = {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}


@pytest.fixture(scope="module")
def web(start_web) -> WebProcess:
    web: WebProcess = start_web(LANGBOT_DB_POOL_MAX="8")
    return web


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


@pytest.fixture
def catalog(worker, qa_report) -> None:
    """The runner catalog as the runtime reports it (what `make run` syncs when the runtime starts)."""
    assert RUNNER_ID in [m.id for m in qa_report.runners], "the runtime did not load plugins/local-agent"
    runner_descriptors_sync(report=qa_report)


class Api:
    """REST calls against daphne with a workspace's API key; every answer must be the expected status."""

    def __init__(self, web: WebProcess, key: str) -> None:
        self.client = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def call(self, method: str, path: str, *, status: int = 200, **kwargs: Any) -> Any:
        response = self.client.request(method, path, **kwargs)
        assert response.status_code == status, (method, path, response.status_code, response.text)
        return response.json()

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        page = self.call("GET", f"/api/v1/runs/{run_id}/events")
        assert not page["has_more"]
        items: list[dict[str, Any]] = page["items"]
        return items

    def chat(self, bot_id: str, text: str, *, conversation_id: str, wait: int = 60) -> dict[str, Any]:
        """One message to a bot, waited for; the bot's single run as the gateway answers it."""
        body = {"bot_id": bot_id, "conversation_id": conversation_id, "input": {"text": text}}
        answer = self.call("POST", f"/api/v1/events?wait={wait}", status=200, json=body)  # the run ended
        assert (answer["status"], len(answer["runs"])) == ("accepted", 1), answer
        run: dict[str, Any] = answer["runs"][0]
        return run


def api_for(web: WebProcess, workspace: Workspace, *, operator: bool = False) -> Api:
    _, key = api_key_create(workspace=workspace, is_operator=operator)
    return Api(web, key)


def answer(*parts: str, delay: float = 0.0) -> Answer:
    """A streamed text answer in `parts`, with usage in its last chunk."""
    return streamed(
        [
            chunk({"role": "assistant", "content": parts[0]}),
            *[chunk({"content": part}) for part in parts[1:]],
            chunk({}, finish_reason="stop"),
            chunk(usage=USAGE),
        ],
        delay=delay,
    )


def tool_call_answer(call_id: str, name: str, arguments: str, *, pieces: int = 3) -> Answer:
    """A streamed tool call whose arguments arrive in `pieces` fragments after the chunk naming it."""
    size = -(-len(arguments) // pieces)
    fragments = [arguments[i : i + size] for i in range(0, len(arguments), size)]
    first = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    return streamed(
        [
            chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
            *[chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}) for part in fragments],
            chunk({}, finish_reason="tool_calls"),
            chunk(usage=USAGE),
        ]
    )


def chat_requests(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [body for path, body in zip(fake.paths, fake.requests, strict=True) if path == "/v1/chat/completions"]


def is_summary_request(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and str(messages[0].get("content") or "").startswith(SUMMARY_PROMPT_START)


def prompt_tokens(model_name: str, messages: list[dict[str, Any]]) -> int:
    """The prompt's size as the host's `count_tokens` counts it (what the runner calibrates its budget by)."""
    parsed = [Message.model_validate(m) for m in messages]
    return token_count(model_name=model_name, messages=parsed, text=None).tokens


def local_agent_setup(
    api: Api, fake: FakeOpenAI, workspace: Workspace, *, runner_config: dict[str, Any], **policy: Any
) -> AgentBinding:
    """A provider and a model made over REST, and a bot bound to the local-agent."""
    provider = api.call(
        "POST",
        "/api/v1/model-providers",
        status=201,
        json={"name": "Fake", "base_url": fake.base_url, "api_key": "sk-fake", "max_retries": 0},
    )
    api.call(
        "POST",
        "/api/v1/models",
        status=201,
        json={"model_id": "m1", "provider_id": provider["provider_id"], "name": "gpt-fake", "kind": "llm",
              "supports_tools": True, "context_window": 8192},
    )  # fmt: skip
    bot = BotFactory.create(workspace=workspace, bot_id="agent-bot")
    return AgentBindingFactory.create(
        workspace=workspace,
        scope_type=AgentBinding.ScopeType.BOT,
        scope_id=bot.bot_id,
        runner_id=RUNNER_ID,
        runner_config={"model": "m1", **runner_config},
        resource_policy={"allowed_model_ids": ["m1"], **policy},
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
        concurrency_policy="queue",
    )


# --- the README walkthrough ---------------------------------------------------------------------------


def readme_walkthrough() -> tuple[list[tuple[str, str, dict[str, Any]]], tuple[str, dict[str, Any]]]:
    """The curl calls of "An LLM agent in a few lines" as (method, path, body), and the chat call the
    README shows above it (path with `?wait=`, body)."""
    text = README.read_text()
    section = text.split("### An LLM agent in a few lines", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    calls = [
        (method or "POST", url.removeprefix(README_HOST), json.loads(body))
        for method, body, url in re.findall(
            r"curl \"\$\{H\[@\]\}\"(?: -X (\w+))? -d '(.*?)'\s*\\?\s*(http://\S+)", block, flags=re.DOTALL
        )
    ]
    event = re.search(r"-d '(\{\"bot_id\".*?)' \"(http://[^\"]+/api/v1/events\?wait=\d+)\"", text, flags=re.DOTALL)
    assert event is not None, "the README's chat call is gone"
    return calls, (event.group(2).removeprefix(README_HOST), json.loads(event.group(1)))


def test_the_readme_walkthrough_binds_the_demo_bot_to_the_local_agent_and_it_answers(web, worker, qa_report, fake):
    # given the demo workspace as `make run` seeds it (then the runtime reports its runners), and an API
    # key as the README makes it
    call_command("seed_demo")
    assert RUNNER_ID in [m.id for m in qa_report.runners], "the runtime did not load plugins/local-agent"
    runner_descriptors_sync(report=qa_report)
    out = io.StringIO()
    call_command("create_api_key", workspace="demo", stdout=out)
    api = Api(web, out.getvalue().strip())
    calls, (chat_path, chat_body) = readme_walkthrough()
    assert [(method, path) for method, path, _ in calls] == [
        ("POST", "/api/v1/model-providers"),
        ("POST", "/api/v1/models"),
        ("PATCH", "/api/v1/bindings/demo-qa"),
    ]

    # when each call is made as written (only the provider's URL points at the local fake)
    (_, provider_path, provider_body), (_, model_path, model_body), (_, binding_path, binding_body) = calls
    provider_body["base_url"] = fake.base_url
    provider = api.call("POST", provider_path, status=201, json=provider_body)
    model = api.call("POST", model_path, status=201, json=model_body)
    binding = api.call("PATCH", binding_path, json=binding_body)
    fake.script.append(answer("Hello", " from", " gpt-4o-mini."))
    chat = api.call("POST", chat_path, status=200, json=chat_body)  # the run ended within the wait

    # then the ids the README relies on are the ones made, and the demo bot answers through the model
    assert provider["provider_id"] == model_body["provider_id"] == "openai"
    assert model["model_id"] == binding_body["runner_config"]["model"] == "gpt-4o-mini"
    assert (binding["runner_id"], binding["config_validated"]) == (RUNNER_ID, True)
    assert (chat["status"], len(chat["runs"])) == ("accepted", 1), chat
    run = chat["runs"][0]
    assert (run["status"], run["binding_id"], run["runner_id"]) == ("completed", "demo-qa", RUNNER_ID), run
    assert run["output"] == "Hello from gpt-4o-mini."
    events = api.run_events(run["run_id"])
    deltas = [e["data"]["chunk"]["content"] for e in events if e["type"] == "message.delta"]
    assert deltas  # streamed (the demo bot is a webui bot); the host may merge deltas that arrive together
    assert "".join(deltas) == "Hello from gpt-4o-mini."
    (request,) = fake.requests
    assert fake.headers[0]["authorization"] == f"Bearer {provider_body['api_key']}"
    assert (request["model"], request["stream"]) == ("gpt-4o-mini", True)
    assert request["messages"] == [
        {"role": "system", "content": binding_body["runner_config"]["prompt"]},
        {"role": "user", "content": chat_body["input"]["text"]},
    ]


# --- an MCP tool --------------------------------------------------------------------------------------


def test_the_agent_calls_an_mcp_tool_over_stdio_and_the_model_reads_its_result(web, catalog, fake):
    workspace = WorkspaceFactory.create()
    api = api_for(web, workspace, operator=True)  # stdio servers are an operator's
    server = api.call(
        "POST",
        "/api/v1/mcp-servers",
        status=201,
        json={"server_id": "calc", "name": "Calculator", "transport": "stdio", "command": sys.executable,
              "args": [SERVER_SCRIPT, "--tools", "add,echo"]},
    )  # fmt: skip
    refreshed = api.call("POST", f"/api/v1/mcp-servers/{server['server_id']}/refresh")
    assert refreshed["status"] == "ok", refreshed
    tools = {tool["tool_name"]: tool for tool in api.call("GET", "/api/v1/tools")}
    assert set(tools) == {"add", "echo"}
    local_agent_setup(api, fake, workspace, runner_config={"prompt": "Use tools."}, allowed_tool_names=["add"])
    fake.script.append(tool_call_answer("call_add_1", "add", '{"a": 19, "b": 23}'))
    fake.script.append(answer("19 + 23 = ", "42."))

    run = api.chat("agent-bot", "What is 19 + 23?", conversation_id=f"mcp-{uuid.uuid4().hex[:6]}")

    assert run["status"] == "completed", run
    assert run["output"] == "19 + 23 = 42."
    events = api.run_events(run["run_id"])
    tool_events = [(e["type"], e["data"]) for e in events if e["type"].startswith("tool.call.")]
    assert [(t, d["tool_call_id"], d["tool_name"]) for t, d in tool_events] == [
        ("tool.call.started", "call_add_1", "add"),
        ("tool.call.completed", "call_add_1", "add"),
    ]
    assert tool_events[0][1]["parameters"] == {"a": 19, "b": 23}
    assert "42" in json.dumps(tool_events[1][1]["result"])
    assert not tool_events[1][1].get("error")
    first, second = chat_requests(fake)
    assert [t["function"]["name"] for t in first["tools"]] == ["add"]  # only what the binding allows
    assert first["tools"][0]["function"]["parameters"] == tools["add"]["parameters"]
    assistant, tool_message = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_add_1"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"a": 19, "b": 23}
    assert (tool_message["role"], tool_message["tool_call_id"]) == ("tool", "call_add_1")
    assert "42" in str(tool_message["content"])
    completed = next(e for e in events if e["type"] == "run.completed")["data"]
    assert (completed["metadata"]["tool_rounds"], completed["metadata"]["tool_calls"]) == (1, 1)


# --- a knowledge-base citation ------------------------------------------------------------------------

HANDBOOK = """# Kettle handbook

## Returns

The Zephyr kettle may be returned within 45 days of delivery, in its original box, with the receipt.

## Descaling

Descale the kettle every month with citric acid; vinegar leaves a taste.
"""


def test_the_agent_cites_a_chunk_of_a_document_uploaded_and_ingested_through_the_real_worker(web, catalog, fake):
    workspace = WorkspaceFactory.create()
    api = api_for(web, workspace)
    api.call("POST", "/api/v1/knowledge-bases", status=201, json={"kb_id": "handbook", "name": "Handbook"})
    document = api.call(
        "POST",
        "/api/v1/knowledge-bases/handbook/documents",
        status=202,
        files={"file": ("kettle-handbook.md", HANDBOOK.encode(), "text/markdown")},
    )
    detail_path = f"/api/v1/knowledge-bases/handbook/documents/{document['document_id']}"
    deadline = time.monotonic() + 60
    while (detail := api.call("GET", detail_path))["status"] not in ("ready", "failed"):
        assert time.monotonic() < deadline, detail
        time.sleep(0.2)
    assert detail["status"] == "ready", detail["error"]
    local_agent_setup(
        api, fake, workspace,
        runner_config={"prompt": "Answer from the handbook.", "knowledge-bases": ["handbook"], "retrieval-top-k": 1},
        allowed_kb_ids=["handbook"],
    )  # fmt: skip
    fake.script.append(answer("Within 45 days [1]."))
    question = "How many days do I have to return the Zephyr kettle?"

    run = api.chat("agent-bot", question, conversation_id=f"kb-{uuid.uuid4().hex[:6]}")

    assert run["status"] == "completed", run
    completed = next(e for e in api.run_events(run["run_id"]) if e["type"] == "run.completed")["data"]
    (citation,) = completed["metadata"]["citations"]
    returns = KnowledgeChunk.objects.get(document__document_id=document["document_id"], text__contains="45 days")
    assert citation["kb_id"] == "handbook"
    assert citation["document_id"] == document["document_id"]
    assert citation["document_name"] == "kettle-handbook.md"
    assert citation["chunk_id"] == f"{document['document_id']}#{returns.position}"
    assert citation["position"] == returns.position
    assert "45 days" in citation["excerpt"]
    (request,) = chat_requests(fake)
    *before, current = request["messages"]
    assert current == {"role": "user", "content": question}  # the user's message as sent, no chunk in it
    context = [m for m in before if "45 days of delivery" in str(m["content"])]
    assert len(context) == 1, before
    assert "<knowledge-context" in context[0]["content"]
    assert "kettle-handbook.md" in context[0]["content"]


# --- 40 turns in a small window -----------------------------------------------------------------------

WINDOW = 1500
RESERVE = 400
SUMMARY_TOKENS = 200
TURNS = 40


def turn_text(n: int) -> str:
    return (
        f"Turn {n}: tell me one more fact about the harbour town we are planning to visit, the ferry times, "
        f"the bakery on the quay, and whether the museum opens on day {n} of the trip."
    )


def reply_text(n: int) -> str:
    return (
        f"Reply {n}: the ferry leaves at {7 + n % 10}:15, the bakery opens at six, and the museum is open on "
        f"day {n}; bring a coat because the wind off the water is cold in the evening."
    )


def conversation_responder(path: str, body: dict[str, Any]) -> Answer | None:
    """Summaries when asked for one; otherwise the reply to the turn the last user message names."""
    if path != "/v1/chat/completions":
        return None
    if is_summary_request(body):
        covered = re.findall(r"Turn (\d+):", body["messages"][-1]["content"])
        return replied(completion(f"Summary up to turn {max(map(int, covered))}: a trip to a harbour town."))
    match = re.match(r"Turn (\d+):", str(body["messages"][-1]["content"]))
    assert match is not None, body["messages"][-1]
    return answer(*re.findall(r".{1,40}", reply_text(int(match.group(1)))))


def test_a_40_turn_conversation_stays_within_its_window_and_keeps_a_summary_checkpoint(web, catalog, fake):
    workspace = WorkspaceFactory.create()
    api = api_for(web, workspace)
    binding = local_agent_setup(
        api, fake, workspace,
        runner_config={"prompt": "You are a travel assistant.", "context-window-tokens": WINDOW,
                       "reserve-tokens": RESERVE, "keep-recent-tokens": 400, "summary-tokens": SUMMARY_TOKENS},
    )  # fmt: skip
    fake.respond_with(conversation_responder)
    conversation = f"long-{uuid.uuid4().hex[:6]}"
    budget = WINDOW - RESERVE

    runs = []
    for n in range(1, TURNS + 1):
        requests_before = len(chat_requests(fake))
        run = api.chat("agent-bot", turn_text(n), conversation_id=conversation)
        assert (run["status"], run["output"]) == ("completed", reply_text(n)), (n, run)
        turn_requests = chat_requests(fake)[requests_before:]
        # every request of the turn fits: the reply's within the budget, a summary's leaves room for it
        for request in turn_requests:
            tokens = prompt_tokens("gpt-fake", request["messages"])
            if is_summary_request(request):
                assert tokens + SUMMARY_TOKENS <= WINDOW, (n, tokens)
            else:
                assert tokens <= budget, (n, tokens, request["messages"])
                assert request["messages"][-1]["content"] == turn_text(n)
        runs.append(run)

    requests = chat_requests(fake)
    summaries = [r for r in requests if is_summary_request(r)]
    replies = [r for r in requests if not is_summary_request(r)]
    assert len(replies) == TURNS
    assert len(summaries) >= 2, "the history was never compacted twice in 40 turns"
    # the last turn still sees the turn before it verbatim, and the summary of what came earlier
    last = replies[-1]["messages"]
    assert {"role": "user", "content": turn_text(TURNS - 1)} in last
    assert {"role": "assistant", "content": reply_text(TURNS - 1)} in last
    assert any("Summary up to turn" in str(m["content"]) for m in last[:-1])
    assert not any(m["content"] == turn_text(1) for m in last)

    # the checkpoint is in conversation state, and the runs that moved it show it in their events
    checkpoint = StateEntry.objects.get(workspace=workspace, scope="conversation", key=CHECKPOINT_KEY).value
    assert isinstance(checkpoint, dict)
    assert checkpoint["fences"][0]["kind"] == "conversation-summary"
    assert checkpoint["fences"][0]["content"].startswith("Summary up to turn")
    assert checkpoint["summarized_items"] > 0
    compacting = []
    for run in runs:
        events = api.run_events(run["run_id"])
        completed = next(e for e in events if e["type"] == "run.completed")["data"]["metadata"]
        assert completed["context"]["tokens"] <= completed["context"]["budget_tokens"] == budget
        updates = [e["data"] for e in events if e["type"] == "state.updated"]
        assert bool(updates) == completed["history"]["compacted"], (run, updates)
        if updates:
            compacting.append(updates[-1])
    assert len(compacting) == len(summaries)
    assert compacting[-1] == {"scope": "conversation", "key": CHECKPOINT_KEY, "value": checkpoint}
    assert binding.runner_id == RUNNER_ID
