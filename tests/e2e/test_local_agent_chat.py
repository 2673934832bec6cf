"""The debug chat bound to the local-agent, in a real browser: a reply that grows as the fake provider
paces its chunks, a tool card for an MCP tool the model calls (the real fake MCP server over stdio), and,
after enough turns for the history to be compacted, the summary checkpoint in the state panel."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bindings.models import AgentBinding
from bindings.services import api_key_create
from runtimes.descriptors import runner_descriptors_sync
from tests.e2e.test_debug_chat import WATCH_REPLIES, _member_of, _sign_in
from tests.factories import AgentBindingFactory, ModelFactory, ModelProviderFactory, WorkspaceFactory
from tests.fakes.mcp_fixtures import SERVER_SCRIPT
from tests.fakes.openai_server import Answer, FakeOpenAI, chunk, completion, fake_openai, replied, streamed

RUNNER_ID = "plugin:langbot/local-agent/default"
CHECKPOINT_KEY = "local-agent.checkpoint"
PACE = 0.12  # seconds between the fake's chunks: each one reaches the page on its own
STORY = (
    "The harbour town has a ferry at nine, a bakery on the quay that sells rye bread, a small museum of "
    "ships, and a lighthouse you can climb on clear days; the wind is cold in the evening."
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with fake_openai() as server:
        yield server


def pieces(text: str, size: int = 24) -> list[str]:
    return re.findall(f".{{1,{size}}}", text, flags=re.DOTALL)


def paced(text: str) -> Answer:
    parts = pieces(text)
    return streamed(
        [
            chunk({"role": "assistant", "content": parts[0]}),
            *[chunk({"content": part}) for part in parts[1:]],
            chunk({}, finish_reason="stop"),
            chunk(usage={"prompt_tokens": 30, "completion_tokens": 40, "total_tokens": 70}),
        ],
        delay=PACE,
    )


def add_call(arguments: str) -> Answer:
    """A call of the `add` tool, its arguments split over chunks."""
    first = {"index": 0, "id": "call_add", "type": "function", "function": {"name": "add", "arguments": ""}}
    return streamed(
        [
            chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
            *[chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}) for part in pieces(arguments, 8)],
            chunk({}, finish_reason="tool_calls"),
        ],
        delay=PACE,
    )


def responder(path: str, body: dict[str, Any]) -> Answer | None:
    """A summary when asked for one; the tool's answer read back; a call of `add` for a sum; else the story."""
    messages = body["messages"]
    if str(messages[0].get("content") or "").startswith("You keep a running summary"):
        return replied(completion("Summary: the user is planning a trip to a harbour town and asked for a sum."))
    last = messages[-1]
    if last["role"] == "tool":
        return paced(f"19 + 23 = {last['content']}.")
    numbers = re.findall(r"\d+", str(last["content"]))
    if str(last["content"]).startswith("Add") and len(numbers) == 2:
        return add_call(json.dumps({"a": int(numbers[0]), "b": int(numbers[1])}))
    return paced(STORY)


def local_agent_binding(web_server: str, fake: FakeOpenAI, qa_report: Any) -> AgentBinding:
    runner_descriptors_sync(report=qa_report)
    workspace = WorkspaceFactory.create()
    provider = ModelProviderFactory.create(workspace=workspace, base_url=fake.base_url, max_retries=0)
    ModelFactory.create(workspace=workspace, provider=provider, model_id="m1", name="gpt-fake", supports_tools=True)
    # The MCP server is made and its tools listed over REST, as an operator (a stdio server runs a program):
    # a worker connects to it, not this process.
    _, key = api_key_create(workspace=workspace, is_operator=True)
    with httpx.Client(base_url=web_server, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        body = {"server_id": "calc", "name": "Calculator", "transport": "stdio", "command": sys.executable,
                "args": [SERVER_SCRIPT, "--tools", "add"]}  # fmt: skip
        assert api.post("/api/v1/mcp-servers", json=body).status_code == 201
        refreshed = api.post("/api/v1/mcp-servers/calc/refresh")
        assert refreshed.status_code == 200, refreshed.text
    return AgentBindingFactory.create(
        workspace=workspace,
        binding_id="local-agent-e2e",
        runner_id=RUNNER_ID,
        runner_config={"model": "m1", "prompt": "You are a travel assistant.", "context-window-tokens": 1300},
        resource_policy={"allowed_model_ids": ["m1"], "allowed_tool_names": ["add"]},
        state_policy={"enable_state": True, "state_scopes": ["conversation"]},
        concurrency_policy="queue",
    )


def send(page: Any, text: str, turn: int) -> None:
    """Send a message and wait until the page shows the turn's reply completed."""
    page.fill("#composer-input", text)
    page.keyboard.press("Enter")
    page.wait_for_function(
        "n => { const done = document.querySelectorAll('.msg.assistant.done');"
        " return done.length === n && done[n - 1].querySelector('.meta .status').textContent === 'completed'; }",
        arg=turn,
        timeout=30_000,
    )


def test_the_local_agent_streams_shows_its_tool_call_and_its_checkpoint_in_the_chat(
    transactional_db, worker, qa_report, web_server, browser, fake, screenshots
):
    binding = local_agent_binding(web_server, fake, qa_report)
    fake.respond_with(responder)
    user = _member_of(binding.workspace)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    _sign_in(page, web_server, user)
    page.evaluate(WATCH_REPLIES)
    page.select_option("#target", f"binding:{binding.binding_id}")

    # a reply that grows chunk by chunk while it streams
    send(page, "Tell me about the harbour town.", 1)
    states = page.evaluate("window.__replyStates")
    grown = list(dict.fromkeys(s["text"] for s in states if s["streaming"] and s["text"]))
    assert len(grown) >= 3, f"the reply did not visibly grow: {grown}"
    assert all(STORY.startswith(text) for text in grown)
    assert [len(text) for text in grown] == sorted(len(text) for text in grown)
    assert page.locator(".msg.assistant .bubble").last.inner_text() == STORY

    # a tool card for the MCP call, its parameters and result, then the model's answer with the result
    send(page, "Add 19 and 23 for me.", 2)
    card = page.locator(".msg.assistant").last.locator(".tool-card")
    assert card.count() == 1
    assert card.locator(".tool-name").inner_text() == "add"
    assert card.locator(".tool-state").inner_text() == "done"
    card.locator("summary").click()  # opened, for the screenshot
    labels = [label.text_content() for label in card.locator(".tool-label").all()]
    card_values = [json.loads(pre.text_content() or "null") for pre in card.locator("pre").all()]
    assert labels == ["parameters", "result"]
    assert card_values[0] == {"a": 19, "b": 23}
    assert "42" in json.dumps(card_values[1])
    assert page.locator(".msg.assistant .bubble").last.inner_text() == "19 + 23 = 42."
    page.screenshot(path=str(screenshots / "local-agent-tool.png"), full_page=True)

    # more turns until the history no longer fits the window: the checkpoint appears in the state panel
    turn = 2
    checkpoint = page.locator("#state li", has=page.locator(".k", has_text=f"conversation:{CHECKPOINT_KEY}"))
    while checkpoint.count() == 0:
        turn += 1
        assert turn <= 12, "no checkpoint in the state panel after 12 turns"
        send(page, f"And what else is there on day {turn}?", turn)
    shown = json.loads(checkpoint.first.locator("pre").inner_text())
    assert shown["fences"][0]["kind"] == "conversation-summary"
    assert shown["fences"][0]["content"].startswith("Summary: the user is planning a trip")
    assert shown["summarized_items"] > 0
    page.screenshot(path=str(screenshots / "local-agent-checkpoint.png"), full_page=True)
    page.close()
