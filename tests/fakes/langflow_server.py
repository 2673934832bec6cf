"""A local Langflow server speaking the run API's real wire format (shapes from Langflow's public API docs),
for tests of the langflow-agent runner.

* `POST /api/v1/run/{flow_id}?stream=true` answers from the script with Langflow's streamed events: one JSON
  object `{"event", "data"}` per line, blank lines between them (`add_message` for the user's and the flow's
  messages, `token` per generated piece, `end` with the run's result), optionally held after some events
  until the client goes away.
* `POST /api/v1/run/{flow_id}` (`stream=false`) answers the run's result as one JSON object: `session_id`
  and `outputs` in Langflow's layout (`outputs[0].outputs[0].results.message.text`, `.outputs.message`,
  `.messages`, `.artifacts`).
* `fail(status, detail)` answers an error with Langflow's body `{"detail": ...}`; an unknown flow id answers
  404 `{"detail": "Flow identifier ... not found"}`.
* `component_failure(message)`: a component of the flow fails, as Langflow reports it: streamed, an `error`
  event `{"error": message}` after the user's message; not streamed, 500 with `detail` the JSON *text* of
  Langflow's exception body `{"message", "traceback", "description", "code", "suggestion"}`.
* Every call needs `x-api-key: <key>`; otherwise 403 `{"detail": "Invalid or missing API key"}`.

Requests' JSON bodies are kept in `requests` and their query parameters in `params`; `disconnected` is set
when a held stream sees its client close the connection.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler, serving

API_KEY = "sk-fake-langflow-key"
FLOW_ID = "3fa85f64-5717-4562-b3fc-2c963f66afa6"


@dataclass
class _Entry:
    reply: str = ""
    tokens: tuple[str, ...] | None = None
    events: list[dict[str, Any]] | None = None
    status: int = 200
    detail: str | None = None
    hold_after: int | None = None
    usage: dict[str, Any] | None = None
    failure: str | None = None


def exception_detail(message: str) -> str:
    """The `detail` of Langflow's 500 when a flow fails: its exception body serialized as JSON text."""
    body = {"message": message, "traceback": None, "description": None, "code": None, "suggestion": None}
    return json.dumps(body, separators=(",", ":"))


def run_result(session_id: str, reply: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run's result as Langflow returns it for a flow ending in a Chat Output component."""
    message = {
        "text": reply, "sender": "Machine", "sender_name": "AI", "session_id": session_id,
        "timestamp": "2025-01-01T00:00:00Z", "flow_id": FLOW_ID, "properties": {"usage": usage} if usage else {},
    }  # fmt: skip
    component = {
        "results": {"message": message},
        "artifacts": {"message": reply, "sender": "Machine", "sender_name": "AI", "type": "object"},
        "outputs": {"message": {"message": reply, "type": "text"}},
        "logs": {"message": []},
        "messages": [{"message": reply, "sender": "Machine", "sender_name": "AI", "session_id": session_id}],
        "timedelta": None,
        "duration": None,
        "component_display_name": "Chat Output",
        "component_id": "ChatOutput-abc12",
        "used_frozen_result": False,
    }
    return {"session_id": session_id, "outputs": [{"inputs": {"input_value": "..."}, "outputs": [component]}]}


def stream_events(
    session_id: str, user_text: str, reply: str, tokens: tuple[str, ...], usage: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The events of a streamed run: the user's message, the flow's message (empty while generating), one
    `token` per piece, the flow's final message, then `end` with the run's result."""
    base = {"session_id": session_id, "flow_id": FLOW_ID, "timestamp": "2025-01-01 00:00:00 UTC"}
    flow_message = {**base, "id": "msg-ai", "sender": "Machine", "sender_name": "AI", "text": "", "properties": {}}
    return [
        {"event": "vertices_sorted", "data": {"ids": ["ChatInput-xyz"], "to_run": ["ChatInput-xyz", "ChatOutput-1"]}},
        {"event": "add_message", "data": {**base, "id": "msg-user", "sender": "User", "sender_name": "User",
                                          "text": user_text, "properties": {}}},
        {"event": "add_message", "data": flow_message},
        *[{"event": "token", "data": {"chunk": piece, "id": "msg-ai", "timestamp": "2025-01-01 00:00:01 UTC"}}
          for piece in tokens],
        {"event": "add_message", "data": {**flow_message, "text": reply,
                                          "properties": {"usage": usage} if usage else {}}},
        {"event": "end", "data": {"result": run_result(session_id, reply, usage)}},
    ]  # fmt: skip


class FakeLangflow(FakePlatformServer):
    def __init__(self, api_key: str = API_KEY, flow_id: str = FLOW_ID) -> None:
        super().__init__(_LangflowHandler)
        self.api_key = api_key
        self.flow_id = flow_id
        self.params: list[dict[str, str]] = []

    @property
    def base_url(self) -> str:
        return self.origin

    def reply(
        self, text: str, *, tokens: tuple[str, ...] | None = None, usage: dict[str, Any] | None = None,
        hold_after: int | None = None,
    ) -> None:  # fmt: skip
        """The next run's reply; streamed as `tokens` (default: the text in one token)."""
        self.script.append(_Entry(reply=text, tokens=tokens, usage=usage, hold_after=hold_after))

    def stream(self, events: list[dict[str, Any]], *, hold_after: int | None = None) -> None:
        """The next streamed run answers exactly these events."""
        self.script.append(_Entry(events=events, hold_after=hold_after))

    def component_failure(self, message: str) -> None:
        self.script.append(_Entry(failure=message))

    def fail(self, status: int, detail: str) -> None:
        self.script.append(_Entry(status=status, detail=detail))


def fake_langflow(api_key: str = API_KEY) -> AbstractContextManager[FakeLangflow]:
    return serving(FakeLangflow(api_key))


class _LangflowHandler(PlatformHandler):
    fake: FakeLangflow

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        path = self.path_only
        if self.headers.get("x-api-key") != fake.api_key:
            self.send_json(403, {"detail": "Invalid or missing API key"})
            return
        prefix = "/api/v1/run/"
        if not path.startswith(prefix):
            self.send_json(404, {"detail": "Not Found"})
            return
        flow_id = path[len(prefix) :]
        if flow_id != fake.flow_id:
            self.send_json(404, {"detail": f"Flow identifier {flow_id} not found"})
            return
        body = json.loads(raw or b"{}")
        params = self.query_params()
        fake.requests.append(body)
        fake.params.append(params)
        if not fake.script:
            self.send_json(500, {"detail": "nothing scripted"})
            return
        entry = fake.script.popleft()
        if entry.detail is not None:
            self.send_json(entry.status, {"detail": entry.detail})
            return
        session_id = body.get("session_id") or FLOW_ID
        if entry.failure is not None:
            self._failure(entry.failure, session_id, body.get("input_value", ""), stream=params.get("stream") == "true")
            return
        if params.get("stream") == "true":
            events = entry.events or stream_events(
                session_id, body.get("input_value", ""), entry.reply, entry.tokens or (entry.reply,), entry.usage
            )
            self._stream(events, entry.hold_after)
        else:
            self.send_json(200, run_result(session_id, entry.reply, entry.usage))

    def _failure(self, message: str, session_id: str, user_text: str, *, stream: bool) -> None:
        if not stream:
            self.send_json(500, {"detail": exception_detail(message)})
            return
        user = {"session_id": session_id, "flow_id": FLOW_ID, "id": "msg-user", "sender": "User", "sender_name": "User",
                "text": user_text, "properties": {}}  # fmt: skip
        self._stream([{"event": "add_message", "data": user}, {"event": "error", "data": {"error": message}}], None)

    def _stream(self, events: list[dict[str, Any]], hold_after: int | None) -> None:
        self.start_stream()
        for index, event in enumerate(events):
            if hold_after is not None and index == hold_after:
                self.hold()
                return
            # Langflow's stream is JSON objects separated by blank lines, not server-sent event frames.
            self.write((json.dumps(event, ensure_ascii=False) + "\n\n").encode())
        if hold_after is not None and hold_after >= len(events):
            self.hold()
