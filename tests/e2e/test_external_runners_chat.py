"""The debug chat bound in turn to two external runners, dify-agent and coze-agent, in a real browser: each
runner's tool call shows as a card that runs then completes, and its reply grows on the page event by event
as the platform streams it.

The fake platforms let their streamed events out one at a time, each when the test has seen the page show
the one before, so every step of the stream is checked on the page rather than timed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bindings.models import Workspace
from bindings.services import api_key_create
from runtimes.descriptors import runner_descriptors_sync
from tests.e2e.test_debug_chat import _member_of, _sign_in
from tests.factories import WorkspaceFactory
from tests.fakes import coze_server, dify_server
from tests.fakes.coze_server import FakeCoze, fake_coze
from tests.fakes.dify_server import FakeDify, fake_dify
from tests.fakes.platform_http import FakePlatformServer

DIFY_RUNNER_ID = "plugin:langbot/dify-agent/default"
COZE_RUNNER_ID = "plugin:langbot/coze-agent/default"
BINDING_ID = "external-e2e"
STEP_TIMEOUT = 30.0  # seconds a stream waits for its next step before going on regardless
PAGE_TIMEOUT = 30_000  # ms the page gets to show a step


class Steps:
    """Lets a fake platform's streamed events out one at a time, when the test says so."""

    def __init__(self) -> None:
        self._allowed = threading.Semaphore(0)

    def allow(self, count: int = 1) -> None:
        for _ in range(count):
            self._allowed.release()

    def wait(self) -> None:
        self._allowed.acquire(timeout=STEP_TIMEOUT)


def stepped(fake: FakePlatformServer, steps: Steps) -> None:
    """Make each event `fake` streams (one with data; Dify's bare `ping` goes at once) wait for a step."""
    server = fake._server  # the fakes take their handler class at construction; this wraps it
    base = server.RequestHandlerClass

    class SteppedHandler(base):  # type: ignore[valid-type,misc]
        def write_event(self, data: Any = None, **kwargs: Any) -> bool:
            if data is not None:
                steps.wait()
            return bool(super().write_event(data, **kwargs))

    server.RequestHandlerClass = SteppedHandler


@pytest.fixture
def dify() -> Iterator[tuple[FakeDify, Steps]]:
    steps = Steps()
    with fake_dify() as server:
        stepped(server, steps)
        yield server, steps
        steps.allow(100)  # a stream the test left waiting ends at once


@pytest.fixture
def coze() -> Iterator[tuple[FakeCoze, Steps]]:
    steps = Steps()
    with fake_coze() as server:
        stepped(server, steps)
        yield server, steps
        steps.allow(100)


@pytest.fixture
def workspace_api(transactional_db, web_server) -> Iterator[tuple[Workspace, httpx.Client]]:
    """A workspace and a REST client of the session's daphne with one of its API keys."""
    workspace = WorkspaceFactory.create()
    _, key = api_key_create(workspace=workspace)
    with httpx.Client(base_url=web_server, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        yield workspace, api


def bind(api: httpx.Client, runner_id: str, config: dict[str, Any]) -> None:
    """Bind the chat's binding to the runner over REST, as a user would: created the first time, its
    runner switched after (the secret in the config is stored encrypted)."""
    body = {"runner_id": runner_id, "runner_config": config}
    if api.get(f"/api/v1/bindings/{BINDING_ID}").status_code == 404:
        body |= {
            "binding_id": BINDING_ID,
            "scope": {"scope_type": "workspace"},
            "event_types": ["message.received"],
            "delivery_policy": {"enable_streaming": True, "enable_reply": True},
        }
        response = api.post("/api/v1/bindings", json=body)
        assert response.status_code == 201, response.text
    else:
        response = api.patch(f"/api/v1/bindings/{BINDING_ID}", json=body)
        assert response.status_code == 200, response.text


def send(page: Any, text: str) -> None:
    page.select_option("#target", f"binding:{BINDING_ID}")
    page.fill("#composer-input", text)
    page.keyboard.press("Enter")


def wait_tool_state(page: Any, turn: int, tool: str, state: str) -> None:
    """Wait until reply `turn` (1-based) shows one tool card, of `tool`, in `state` (running | done)."""
    page.wait_for_function(
        "([n, tool, state]) => { const reply = document.querySelectorAll('.msg.assistant')[n - 1];"
        " const cards = reply ? reply.querySelectorAll('.tool-card') : [];"
        " return cards.length === 1 && cards[0].querySelector('.tool-name').textContent === tool"
        " && cards[0].querySelector('.tool-state').textContent === state; }",
        arg=[turn, tool, state],
        timeout=PAGE_TIMEOUT,
    )


def wait_streaming_text(page: Any, turn: int, text: str) -> None:
    """Wait until reply `turn` shows exactly `text` and is still streaming."""
    page.wait_for_function(
        "([n, text]) => { const reply = document.querySelectorAll('.msg.assistant')[n - 1];"
        " return !!reply && reply.classList.contains('streaming')"
        " && reply.querySelector('.bubble').textContent === text; }",
        arg=[turn, text],
        timeout=PAGE_TIMEOUT,
    )


def wait_completed(page: Any, turn: int) -> None:
    page.wait_for_function(
        "n => { const reply = document.querySelectorAll('.msg.assistant')[n - 1];"
        " return !!reply && reply.classList.contains('done')"
        " && reply.querySelector('.meta .status').textContent === 'completed'; }",
        arg=turn,
        timeout=PAGE_TIMEOUT,
    )


def tool_card(page: Any, turn: int) -> tuple[Any, str]:
    """Reply `turn`'s tool card, opened: its parameters (JSON) and its result as shown."""
    card = page.locator(".msg.assistant").nth(turn - 1).locator(".tool-card")
    card.locator("summary").click()
    labels = [label.text_content() for label in card.locator(".tool-label").all()]
    assert labels == ["parameters", "result"]
    parameters, result = (pre.text_content() or "" for pre in card.locator("pre").all())
    return json.loads(parameters), result


def grow_reply(page: Any, steps: Steps, turn: int, parts: list[str]) -> None:
    """Let the stream's answer out part by part; the page shows each prefix while the reply streams."""
    shown = ""
    for part in parts:
        steps.allow()
        shown += part
        wait_streaming_text(page, turn, shown)


def test_the_debug_chat_streams_dify_and_coze_replies_with_their_tool_cards(
    worker, qa_report, web_server, workspace_api, browser, dify, coze, screenshots
):
    # given the chat open on a binding of dify-agent to the fake Dify
    runner_descriptors_sync(report=qa_report)
    workspace, api = workspace_api
    dify_fake, dify_steps = dify
    coze_fake, coze_steps = coze
    dify_config = {"base-url": dify_fake.base_url, "api-key": dify_server.API_KEY, "app-type": "agent", "timeout": 30}
    bind(api, DIFY_RUNNER_ID, dify_config)
    dify_answer = "It is noon in Hangzhou right now."
    dify_fake.stream(dify_server.agent_events(tool="current_time", tool_input={"city": "Hangzhou"},
                                              observation="12:00", answer=dify_answer))  # fmt: skip
    coze_parts = ["Sunny", " and 25°C", " in Hangzhou", " today."]
    coze_fake.stream(coze_server.chat_events(*coze_parts, tool=("weather", {"city": "Hangzhou"}, "sunny, 25°C")))
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    _sign_in(page, web_server, _member_of(workspace))

    # when the Dify agent answers: a thought choosing a tool, its observation, the answer word by word
    send(page, "What time is it in Hangzhou?")
    dify_steps.allow()
    wait_tool_state(page, 1, "current_time", "running")
    dify_steps.allow()
    wait_tool_state(page, 1, "current_time", "done")
    words = dify_answer.split(" ")
    grow_reply(page, dify_steps, 1, [word + (" " if i < len(words) - 1 else "") for i, word in enumerate(words)])
    dify_steps.allow()  # message_end
    wait_completed(page, 1)

    # then the reply is Dify's answer, beside a card of the tool call with its input and observation
    assert page.locator(".msg.assistant .bubble").nth(0).inner_text() == dify_answer
    assert tool_card(page, 1) == ({"city": "Hangzhou"}, "12:00")
    page.screenshot(path=str(screenshots / "dify-agent-chat.png"), full_page=True)

    # when the binding is switched to coze-agent and the Coze bot answers in the same chat: the chat set
    # up, a plugin call and its response, the answer in deltas, then the completed message, the verbose
    # message, the chat completed and [DONE]
    coze_config = {"api-key": coze_server.TOKEN, "bot-id": coze_server.BOT_ID, "api-base": coze_fake.base_url}
    bind(api, COZE_RUNNER_ID, {**coze_config, "timeout": 30})
    send(page, "And the weather there?")
    coze_steps.allow(3)
    wait_tool_state(page, 2, "weather", "running")
    coze_steps.allow()
    wait_tool_state(page, 2, "weather", "done")
    grow_reply(page, coze_steps, 2, coze_parts)
    coze_steps.allow(4)
    wait_completed(page, 2)

    # then the second reply is Coze's, with its own tool card; the first is unchanged
    assert page.locator(".msg.assistant .bubble").all_inner_texts() == [dify_answer, "".join(coze_parts)]
    assert tool_card(page, 2) == ({"city": "Hangzhou"}, "sunny, 25°C")
    assert [request["query"] for request in dify_fake.requests] == ["What time is it in Hangzhou?"]
    assert [request["additional_messages"][0]["content"] for request in coze_fake.requests] == [
        "And the weather there?"
    ]
    page.screenshot(path=str(screenshots / "coze-agent-chat.png"), full_page=True)
    page.close()
