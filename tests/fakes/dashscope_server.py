"""A local DashScope (Aliyun Model Studio) app API speaking the real wire format (shapes from the public
"application call" docs), for tests of the dashscope-agent runner.

* `POST /api/v1/apps/{app_id}/completion` with `X-DashScope-SSE: enable` answers from the script with
  server-sent events framed as DashScope frames them (`id:n`, `event:result`, `:HTTP_STATUS/200`,
  `data:{json}`), each carrying `output` (`session_id`, `finish_reason` "null" then "stop", the new `text`
  with `incremental_output`, or a `workflow_message` for workflow apps in `message_format` mode,
  `doc_references` on the last chunk), `usage` and `request_id`; optionally held after some chunks until the
  client goes away. An `error_event` entry sends `event:error` with `{"code", "message", "request_id"}`.
* Without that header it answers one JSON object with the whole `output.text`.
* `fail(status, code, message)` answers DashScope's error body `{"code", "message", "request_id"}`; an
  `input.session_id` the server did not issue is accepted as a new session (as DashScope does for an
  expired one), and answered with a fresh id.
* Every call needs `Authorization: Bearer <key>`; otherwise 401 `{"code": "InvalidApiKey", ...}`.

Requests' JSON bodies are kept in `requests` and their headers in `headers`; `disconnected` is set when a
held stream sees its client close the connection.
"""

from __future__ import annotations

import json
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.platform_http import FakePlatformServer, PlatformHandler, serving

API_KEY = "sk-fake-dashscope-key"
APP_ID = "a1b2c3d4e5f60718293a4b5c6d7e8f90"


@dataclass
class _Entry:
    parts: tuple[str, ...] = ()
    references: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    status: int = 200
    error: dict[str, Any] | None = None
    error_event: dict[str, Any] | None = None
    hold_after: int | None = None


def reference(index_id: str, doc_name: str, text: str = "") -> dict[str, Any]:
    return {"index_id": index_id, "title": doc_name.rsplit(".", 1)[0], "doc_id": f"file_{index_id}",
            "doc_name": doc_name, "text": text or f"contents of {doc_name}", "images": []}  # fmt: skip


class FakeDashScope(FakePlatformServer):
    def __init__(self, api_key: str = API_KEY, app_id: str = APP_ID) -> None:
        super().__init__(_DashScopeHandler)
        self.api_key = api_key
        self.app_id = app_id
        self.headers: list[dict[str, str]] = []
        self.issued_sessions: set[str] = set()

    @property
    def base_url(self) -> str:
        return f"{self.origin}/api/v1"

    def answer(
        self, *parts: str, references: list[dict[str, Any]] | None = None, usage: dict[str, Any] | None = None,
        hold_after: int | None = None,
    ) -> None:  # fmt: skip
        """The next call's answer, streamed one part per chunk (or whole, joined)."""
        self.script.append(_Entry(parts=parts, references=references or [], usage=usage, hold_after=hold_after))

    def fail(self, status: int, code: str, message: str) -> None:
        self.script.append(_Entry(status=status, error={"code": code, "message": message}))

    def error_event(self, code: str, message: str, *, after: tuple[str, ...] = ()) -> None:
        self.script.append(_Entry(parts=after, error_event={"code": code, "message": message}))


def fake_dashscope(api_key: str = API_KEY) -> AbstractContextManager[FakeDashScope]:
    return serving(FakeDashScope(api_key))


class _DashScopeHandler(PlatformHandler):
    fake: FakeDashScope

    def do_POST(self) -> None:  # noqa: N802 (http.server names it)
        fake = self.fake
        raw = self.read_body()
        request_id = str(uuid.uuid4())
        if self.headers.get("authorization") != f"Bearer {fake.api_key}":
            self.send_json(401, {"code": "InvalidApiKey", "message": "Invalid API-key provided.",
                                 "request_id": request_id})  # fmt: skip
            return
        if self.path_only != f"/api/v1/apps/{fake.app_id}/completion":
            self.send_json(404, {"code": "InvalidParameter", "message": "App not found or access denied",
                                 "request_id": request_id})  # fmt: skip
            return
        body = json.loads(raw or b"{}")
        fake.requests.append(body)
        fake.headers.append(self.header_map())
        if not fake.script:
            self.send_json(500, {"code": "InternalError", "message": "nothing scripted", "request_id": request_id})
            return
        entry = fake.script.popleft()
        if entry.error is not None:
            self.send_json(entry.status, {**entry.error, "request_id": request_id})
            return
        sent = (body.get("input") or {}).get("session_id")
        session_id = sent if sent in fake.issued_sessions else uuid.uuid4().hex
        fake.issued_sessions.add(session_id)
        workflow = (body.get("parameters") or {}).get("flow_stream_mode") == "message_format"
        if self.headers.get("x-dashscope-sse") == "enable":
            self._stream(entry, session_id, request_id, workflow=workflow)
        else:
            output = {"text": "".join(entry.parts), "finish_reason": "stop", "session_id": session_id,
                      "doc_references": entry.references or None}  # fmt: skip
            self.send_json(200, {"output": output, "usage": _usage(entry), "request_id": request_id})

    def _stream(self, entry: _Entry, session_id: str, request_id: str, *, workflow: bool) -> None:
        self.start_stream("text/event-stream;charset=UTF-8")
        count = len(entry.parts)
        for index, part in enumerate(entry.parts):
            if entry.hold_after is not None and index == entry.hold_after:
                self.hold()
                return
            last = index == count - 1 and entry.error_event is None
            output: dict[str, Any] = {"session_id": session_id, "finish_reason": "stop" if last else "null"}
            if workflow:
                output["workflow_message"] = {
                    "node_id": "End_1", "node_name": "结束", "node_type": "End", "node_status": "executing",
                    "node_is_completed": last, "node_msg_seq_id": index,
                    "message": {"role": "assistant", "content": part},
                }  # fmt: skip
            else:
                output["text"] = part
            if last and entry.references:
                output["doc_references"] = entry.references
            chunk = {"output": output, "usage": _usage(entry), "request_id": request_id}
            self._event(index + 1, "result", 200, chunk)
        if entry.error_event is not None:
            self._event(count + 1, "error", 400, {**entry.error_event, "request_id": request_id})
        elif entry.hold_after is not None:
            self.hold()

    def _event(self, event_id: int, name: str, status: int, data: dict[str, Any]) -> None:
        # DashScope frames each event with its HTTP status as a comment line before the data.
        self.write_event(data, event_id=event_id, event=name, comment=f"HTTP_STATUS/{status}", separator=":")


def _usage(entry: _Entry) -> dict[str, Any]:
    return entry.usage or {"models": [{"model_id": "qwen-plus", "input_tokens": 120, "output_tokens": 30}]}
