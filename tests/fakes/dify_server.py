"""A local Dify service API speaking the real wire format (shapes from Dify's public API docs), for tests of
the dify-agent runner.

* `POST /v1/chat-messages` and `POST /v1/workflows/run` answer from one script, one entry per request, in
  order: a stream of events (`stream`: each `data: {json}\\n\\n`, with an `event: ping` frame first, as
  Dify sends them), optionally held after some events until the client goes away or `release()`; or an
  error answer with Dify's error body `{"code", "message", "status"}` (`fail`). Helpers build the events
  of a chat answer (`chat_events`), an agent answer with a tool call (`agent_events`) and a workflow run
  (`workflow_events`).
* A `conversation_id` the server did not issue answers 404 `Conversation Not Exists.`, as Dify does.
* `POST /v1/files/upload` (multipart `file` + `user`) answers 201 with the file's id, name, size,
  extension and mime type; the uploads are kept in `uploads`.
* `POST /v1/chat-messages/{task_id}/stop` and `POST /v1/workflows/tasks/{task_id}/stop` answer
  `{"result": "success"}` and are kept in `stops`.
* Every call needs `Authorization: Bearer <api_key>`; otherwise 401 with Dify's body.

Requests' JSON bodies are kept in `requests` (paths in `paths`); `disconnected` is set when a held stream
sees its client close the connection.
"""

from __future__ import annotations

import json
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler, Upload, serving

__all__ = ["API_KEY", "FakeDify", "Upload", "agent_events", "chat_events", "fake_dify", "workflow_events"]

API_KEY = "app-fake-dify-key"


@dataclass
class _Entry:
    kind: str  # stream | fail
    events: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    body: Any = None
    hold_after: int | None = None


def chat_events(
    *parts: str,
    conversation_id: str = "dify-conv-1",
    task_id: str = "task-1",
    usage: dict[str, Any] | None = None,
    retriever_resources: list[dict[str, Any]] | None = None,
    event: str = "message",
) -> list[dict[str, Any]]:
    """A chat app's answer: one `message` event per part, then `message_end` with usage and resources."""
    common = {"task_id": task_id, "id": "msg-1", "message_id": "msg-1", "conversation_id": conversation_id}
    events: list[dict[str, Any]] = [
        {"event": event, **common, "answer": part, "created_at": 1705395332} for part in parts
    ]
    metadata: dict[str, Any] = {
        "usage": usage
        or {
            "prompt_tokens": 1033,
            "prompt_unit_price": "0.001",
            "prompt_price_unit": "0.001",
            "prompt_price": "0.0010330",
            "completion_tokens": 135,
            "completion_unit_price": "0.002",
            "completion_price_unit": "0.001",
            "completion_price": "0.0002700",
            "total_tokens": 1168,
            "total_price": "0.0013030",
            "currency": "USD",
            "latency": 1.381760165997548,
        }
    }
    if retriever_resources is not None:
        metadata["retriever_resources"] = retriever_resources
    events.append({"event": "message_end", **common, "metadata": metadata})
    return events


def agent_events(
    *,
    tool: str = "current_time",
    tool_input: dict[str, Any] | None = None,
    observation: str = "12:00",
    answer: str = "It is noon.",
    conversation_id: str = "dify-conv-1",
    task_id: str = "task-a",
) -> list[dict[str, Any]]:
    """An agent app's answer: a thought choosing a tool, the same thought with its observation, the answer
    as `agent_message` events, then `message_end`."""
    common = {"task_id": task_id, "message_id": "msg-a", "conversation_id": conversation_id}
    thought = {
        "event": "agent_thought",
        **common,
        "id": "thought-1",
        "position": 1,
        "thought": "I should check the time",
        "tool": tool,
        "tool_labels": {tool: {"en_US": tool}},
        "tool_input": json.dumps({tool: tool_input or {}}),
        "observation": "",
        "message_files": [],
        "created_at": 1705395332,
    }
    done = {**thought, "observation": json.dumps({tool: observation})}
    words = answer.split(" ")
    messages = [
        {"event": "agent_message", **common, "id": "msg-a", "answer": word + (" " if i < len(words) - 1 else "")}
        for i, word in enumerate(words)
    ]
    end = chat_events(conversation_id=conversation_id, task_id=task_id)[-1]
    return [thought, done, *messages, end]


def workflow_events(
    outputs: dict[str, Any],
    *,
    task_id: str = "task-w",
    status: str = "succeeded",
    error: str | None = None,
    chunks: tuple[str, ...] = (),
    total_tokens: int = 42,
) -> list[dict[str, Any]]:
    """A workflow run: started, an LLM node started and finished, text chunks, then workflow_finished."""
    run = {"task_id": task_id, "workflow_run_id": "wf-run-1"}
    node = {"id": "node-exec-1", "node_id": "llm", "node_type": "llm", "title": "LLM", "index": 2}
    return [
        {
            "event": "workflow_started",
            **run,
            "data": {"id": "wf-run-1", "workflow_id": "wf-1", "sequence_number": 1, "created_at": 1705395332},
        },
        {"event": "node_started", **run, "data": {**node, "inputs": {"query": "hi"}, "created_at": 1705395332}},
        *[
            {"event": "text_chunk", **run, "data": {"text": chunk, "from_variable_selector": ["llm", "text"]}}
            for chunk in chunks
        ],
        {
            "event": "node_finished",
            **run,
            "data": {
                **node,
                "inputs": {"query": "hi"},
                "outputs": outputs,
                "status": "succeeded",
                "error": None,
                "elapsed_time": 0.3,
                "execution_metadata": {"total_tokens": total_tokens},
            },
        },
        {
            "event": "workflow_finished",
            **run,
            "data": {
                "id": "wf-run-1",
                "workflow_id": "wf-1",
                "status": status,
                "outputs": outputs if status == "succeeded" else None,
                "error": error,
                "elapsed_time": 0.5,
                "total_tokens": total_tokens,
                "total_steps": 3,
                "created_at": 1705395332,
                "finished_at": 1705395333,
            },
        },
    ]


class FakeDify(FakePlatformServer):
    def __init__(self, api_key: str = API_KEY) -> None:
        super().__init__(_DifyHandler)
        self.api_key = api_key
        self.paths: list[str] = []
        self.uploads: list[Upload] = []
        self.stops: list[tuple[str, dict[str, Any]]] = []
        self.issued_conversations: set[str] = set()

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def stream(self, events: list[dict[str, Any]], *, hold_after: int | None = None) -> None:
        for event in events:
            if event.get("conversation_id"):
                self.issued_conversations.add(event["conversation_id"])
        self.script.append(_Entry("stream", events=events, hold_after=hold_after))

    def fail(self, status: int, code: str, message: str) -> None:
        self.script.append(_Entry("fail", status=status, body={"code": code, "message": message, "status": status}))


def fake_dify(api_key: str = API_KEY) -> AbstractContextManager[FakeDify]:
    return serving(FakeDify(api_key))


class _DifyHandler(PlatformHandler):
    fake: FakeDify

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        path = self.path_only.rstrip("/")
        if self.headers.get("authorization") != f"Bearer {fake.api_key}":
            self.send_json(401, {"code": "unauthorized", "message": "Access token is invalid", "status": 401})
            return
        if path == "/v1/files/upload":
            self._upload(raw)
            return
        if path.endswith("/stop") and (path.startswith(("/v1/chat-messages/", "/v1/workflows/tasks/"))):
            fake.stops.append((path, json.loads(raw or b"{}")))
            self.send_json(200, {"result": "success"})
            return
        if path not in ("/v1/chat-messages", "/v1/workflows/run"):
            self.send_json(404, {"code": "not_found", "message": f"no route {path}", "status": 404})
            return
        body = json.loads(raw or b"{}")
        fake.requests.append(body)
        fake.paths.append(path)
        conversation_id = body.get("conversation_id")
        if conversation_id and conversation_id not in fake.issued_conversations:
            self.send_json(404, {"code": "not_found", "message": "Conversation Not Exists.", "status": 404})
            return
        if not fake.script:
            self.send_json(500, {"code": "internal_server_error", "message": "nothing scripted", "status": 500})
            return
        entry = fake.script.popleft()
        if entry.kind == "fail":
            self.send_json(entry.status, entry.body)
            return
        self._stream(entry)

    def _upload(self, raw: bytes) -> None:
        parts = self.form_parts(raw)
        if "file" not in parts:
            self.send_json(400, {"code": "no_file_uploaded", "message": "Please upload your file.", "status": 400})
            return
        user = parts["user"].get_content().strip() if "user" in parts else ""
        upload = Upload.of(parts["file"], str(uuid.uuid4()), user=user if isinstance(user, str) else "")
        self.fake.uploads.append(upload)
        self.send_json(
            201,
            {
                "id": upload.file_id,
                "name": upload.name,
                "size": len(upload.content),
                "extension": upload.name.rsplit(".", 1)[-1] if "." in upload.name else "",
                "mime_type": upload.mime_type,
                "created_by": upload.user,
                "created_at": 1705395332,
            },
        )

    def _stream(self, entry: _Entry) -> None:
        self.start_stream(no_cache=True)
        self.write_event(event="ping")
        for index, event in enumerate(entry.events):
            if entry.hold_after is not None and index == entry.hold_after:
                self.hold()
                return
            self.write_event(event)
        if entry.hold_after is not None and entry.hold_after >= len(entry.events):
            self.hold()
