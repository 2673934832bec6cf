"""The dify-agent runner: one run is one call of a Dify app's service API, streamed back as results.

Chat, agent and chatflow apps get `POST /chat-messages`, workflow apps `POST /workflows/run`, both with
`response_mode: streaming`. Dify's server-sent events become results:

* `message` / `agent_message` / `text_chunk` → `message.delta` (then one `message.completed`);
* `agent_thought` → `tool.call.started` when a tool is chosen, `tool.call.completed` with its observation;
  in workflow apps `node_started` / `node_finished` do the same for each node;
* `message_file` → an image or file part of the final message;
* `message_end` → usage (normalized) and retriever resources (→ `run.completed` metadata `citations`);
* `workflow_finished` → the workflow's output (`summary`, `answer`, `text`, `output`, else the outputs);
* `error`, or a failed workflow → `run.failed` `dify.error`; `ping` is a keep-alive.

Files of the input (attachments, image parts) are read through the host's artifact API and uploaded with
`POST /files/upload` first. Dify's conversation id is kept in conversation state under
`external.conversation_id`; only an id Dify issued is stored and sent back, and one Dify no longer knows
is dropped and the turn retried once as a new conversation. A cancelled (or timed-out) run asks Dify to stop
the task and closes the HTTP stream. Config field names are those of LangBot's `ai.dify-service-api`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.external import (
    CONVERSATION_ID_KEY,
    DEFAULT_TIMEOUT,
    STATE_SCOPE,
    ConversationGoneError,
    ExternalAgentRunner,
    ExternalRunnerError,
    Platform,
    RunnerConfig,
    continued_or_restarted,
    input_file_content,
    input_files,
    input_text,
    json_answer,
    json_object,
    platform_user,
    sse_events,
    stop_request,
    stored_text,
    streaming_request,
    usage_normalized,
)
from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy

APP_TYPES = ("chat", "agent", "workflow", "chatflow")
THINKING_MODES = ("plain", "original", "remove")
DEFAULT_BASE_URL = "https://api.dify.ai/v1"
DEFAULT_BASE_PROMPT = (
    "When the file content is readable, please read the content of this file. "
    "When the file is an image, describe the content of this image."
)
UPLOAD_MAX_BYTES = 15 * 1024 * 1024  # Dify's default upload limit
CITATION_CONTENT_CHARS = 500
TOOL_RESULT_CHARS = 4000
USAGE_EXTRAS = ("total_price", "currency", "latency")
WORKFLOW_OUTPUT_KEYS = ("summary", "answer", "text", "output", "result")
SILENT_NODE_TYPES = frozenset({"start", "end", "answer"})


@dataclass(frozen=True)
class DifySettings:
    base_url: str
    api_key: str
    app_type: str
    base_prompt: str
    timeout: float
    remove_think: bool

    @property
    def is_workflow(self) -> bool:
        return self.app_type == "workflow"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


def read_settings(config: dict[str, Any], platform: Platform) -> DifySettings:
    reader = RunnerConfig(config, platform)
    return DifySettings(
        base_url=reader.url("base-url"),
        api_key=reader.secret("api-key"),
        app_type=reader.choice("app-type", APP_TYPES, "chat"),
        base_prompt=reader.text("base-prompt", DEFAULT_BASE_PROMPT) or DEFAULT_BASE_PROMPT,
        timeout=reader.seconds("timeout", DEFAULT_TIMEOUT),
        remove_think=reader.flag("remove-think", False)
        or reader.choice("thinking-convert", THINKING_MODES, "plain") == "remove",
    )


class ThinkFilter:
    """Drops `<think>...</think>` from text that arrives in pieces; a tag split across pieces is held back
    until it is known whether it is one."""

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._inside = False
        self._pending = ""

    def feed(self, text: str) -> str:
        if not self.enabled:
            return text
        buffer, out = self._pending + text, []
        self._pending = ""
        while buffer:
            tag = self.CLOSE if self._inside else self.OPEN
            index = buffer.find(tag)
            if index >= 0:
                if not self._inside:
                    out.append(buffer[:index])
                buffer = buffer[index + len(tag) :]
                self._inside = not self._inside
                continue
            keep = _partial_suffix(buffer, tag)
            if not self._inside:
                out.append(buffer[: len(buffer) - keep])
            self._pending = buffer[len(buffer) - keep :] if keep else ""
            break
        return "".join(out)

    def finish(self) -> str:
        rest, self._pending = ("" if self._inside else self._pending), ""
        return rest


def _partial_suffix(text: str, tag: str) -> int:
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


def strip_think(text: str) -> str:
    return re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()


def dify_file_type(mime_type: str) -> str:
    for prefix in ("image", "audio", "video"):
        if mime_type.startswith(prefix + "/"):
            return prefix
    return "document"


@dataclass
class Turn:
    """What one streamed answer has produced so far."""

    task_id: str | None = None
    conversation_id: str | None = None
    text: list[str] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    citations: list[dict[str, Any]] = field(default_factory=list)
    workflow_output: str | None = None
    tools_started: dict[str, str] = field(default_factory=dict)
    tools_completed: set[str] = field(default_factory=set)


class DifyAgentRunner(ExternalAgentRunner):
    platform_name = "dify"
    platform_label = "Dify"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        settings = read_settings(ctx.config, platform)
        stored = None if settings.is_workflow else await stored_text(api, CONVERSATION_ID_KEY)
        files = await self._upload_inputs(ctx, api, settings, platform)
        turn = functools.partial(self._call, ctx, settings, platform, files)
        async for result in continued_or_restarted(turn, stored, ctx=ctx):
            yield result

    async def _upload_inputs(
        self, ctx: AgentRunContext, api: AgentRunAPIProxy, settings: DifySettings, platform: Platform
    ) -> list[dict[str, Any]]:
        uploaded: list[dict[str, Any]] = []
        for file in input_files(ctx):
            upload = await input_file_content(api, platform, file, max_bytes=UPLOAD_MAX_BYTES)
            async with streaming_request(
                platform,
                "POST",
                f"{settings.base_url}/files/upload",
                timeout=settings.timeout,
                headers=settings.headers,
                files={"file": (upload.name, upload.content, upload.mime_type)},
                data={"user": platform_user(ctx)},
            ) as response:
                answer = await json_answer(platform, response)
            file_id = answer.get("id") if isinstance(answer, dict) else None
            if not isinstance(file_id, str) or not file_id:
                raise platform.error("protocol_error", "Dify's upload answer has no file id")
            uploaded.append(
                {"type": dify_file_type(upload.mime_type), "transfer_method": "local_file", "upload_file_id": file_id}
            )
        return uploaded

    def _request(
        self, ctx: AgentRunContext, settings: DifySettings, files: list[dict[str, Any]], conversation_id: str | None
    ) -> tuple[str, dict[str, Any]]:
        text = input_text(ctx).strip() or settings.base_prompt
        user = platform_user(ctx)
        created = ctx.event.event_time or 0
        # The inputs old LangBot sent, kept so existing Dify apps that declare them (possibly as required
        # inputs) still get them: its pipeline variables under their own names — for chat and agent apps the
        # conversation id was Dify's — and, which it added for workflows, the same with a `langbot_` prefix.
        inputs = {
            "user_message_text": text,
            "session_id": user,
            "conversation_id": (ctx.context.conversation_id or "") if settings.is_workflow else (conversation_id or ""),
            "msg_create_time": created,
            "langbot_user_message_text": text,
            "langbot_session_id": user,
            "langbot_conversation_id": ctx.context.conversation_id or "",
            "langbot_msg_create_time": created,
        }
        body: dict[str, Any] = {"inputs": inputs, "response_mode": "streaming", "user": user, "files": files}
        if settings.is_workflow:
            return f"{settings.base_url}/workflows/run", body
        body.update(query=text, conversation_id=conversation_id or "")
        return f"{settings.base_url}/chat-messages", body

    async def _call(
        self,
        ctx: AgentRunContext,
        settings: DifySettings,
        platform: Platform,
        files: list[dict[str, Any]],
        conversation_id: str | None,
    ) -> AsyncIterator[AgentRunResult]:
        url, body = self._request(ctx, settings, files, conversation_id)
        turn = Turn()
        think = ThinkFilter(settings.remove_think)
        try:
            async with streaming_request(
                platform, "POST", url, timeout=settings.timeout, headers=settings.headers, json=body
            ) as response:
                async for event in sse_events(response):
                    payload = json_object(event.data)
                    if not payload:
                        continue
                    for result in self._on_event(ctx, settings, platform, turn, think, payload):
                        yield result
        except asyncio.CancelledError:
            await self._stop(ctx, settings, platform, turn)
            raise
        except ExternalRunnerError as exc:
            if exc.code == "dify.timeout":
                await self._stop(ctx, settings, platform, turn)
            elif conversation_id and exc.details.get("status") == 404 and "conversation" in exc.message.lower():
                raise ConversationGoneError from None
            raise
        tail = think.finish()
        if tail:
            turn.text.append(tail)
            yield AgentRunResult.message_delta(ctx.run_id, tail)
        for result in self._finish(ctx, settings, platform, turn, conversation_id):
            yield result

    def _on_event(
        self,
        ctx: AgentRunContext,
        settings: DifySettings,
        platform: Platform,
        turn: Turn,
        think: ThinkFilter,
        payload: dict[str, Any],
    ) -> list[AgentRunResult]:
        run_id = ctx.run_id
        kind = payload.get("event")
        turn.task_id = payload.get("task_id") or turn.task_id
        if isinstance(payload.get("conversation_id"), str) and payload["conversation_id"]:
            turn.conversation_id = payload["conversation_id"]
        if kind in ("message", "agent_message"):
            return self._text(run_id, turn, think, payload.get("answer"))
        if kind == "text_chunk" and settings.is_workflow:
            return self._text(run_id, turn, think, (payload.get("data") or {}).get("text"))
        if kind == "agent_thought":
            return self._thought(run_id, turn, payload)
        if kind == "message_file":
            self._file(settings, turn, payload)
        elif kind == "message_end":
            metadata = payload.get("metadata") or {}
            turn.usage = usage_normalized(metadata.get("usage"), source="dify", extra_keys=USAGE_EXTRAS)
            turn.citations = [_citation(item) for item in metadata.get("retriever_resources") or []]
        elif kind in ("node_started", "node_finished") and settings.is_workflow:
            return self._node(run_id, turn, kind, payload.get("data") or {})
        elif kind == "workflow_finished":
            data = payload.get("data") or {}
            if data.get("status") not in (None, "succeeded") or data.get("error"):
                raise platform.stream_error(
                    str(data.get("error") or f"workflow {data.get('status')}"), status=data.get("status")
                )
            if settings.is_workflow:
                turn.workflow_output = _workflow_output(data.get("outputs"))
                total = data.get("total_tokens")
                turn.usage = usage_normalized({"total_tokens": total}, source="dify") if total else turn.usage
        elif kind == "error":
            status = payload.get("status")
            retryable = isinstance(status, int) and (status == 429 or status >= 500)
            raise platform.stream_error(
                str(payload.get("message") or "unknown error"),
                retryable=retryable,
                status=status,
                platform_code=payload.get("code"),
            )
        return []

    def _text(self, run_id: str, turn: Turn, think: ThinkFilter, answer: Any) -> list[AgentRunResult]:
        if not isinstance(answer, str) or not answer:
            return []
        visible = think.feed(answer)
        if not visible:
            return []
        turn.text.append(visible)
        return [AgentRunResult.message_delta(run_id, visible)]

    def _thought(self, run_id: str, turn: Turn, payload: dict[str, Any]) -> list[AgentRunResult]:
        thought_id = str(payload.get("id") or payload.get("position") or "thought")
        tools = [name.strip() for name in str(payload.get("tool") or "").split(";") if name.strip()]
        inputs = json_object(payload.get("tool_input"))
        observation = payload.get("observation")
        observations = json_object(observation)
        results: list[AgentRunResult] = []
        for tool in tools:
            call_id = f"{thought_id}:{tool}"
            if call_id not in turn.tools_started:
                # Dify keys the input (and the observation) by tool name, one entry per tool of the thought.
                parameters = inputs.get(tool, inputs)
                turn.tools_started[call_id] = tool
                results.append(
                    AgentRunResult.tool_call_started(
                        run_id, call_id, tool, parameters if isinstance(parameters, dict) else {}
                    )
                )
            if observation and call_id not in turn.tools_completed:
                result = observations.get(tool, observation)
                turn.tools_completed.add(call_id)
                results.append(AgentRunResult.tool_call_completed(run_id, call_id, tool, _clip(result)))
        return results

    def _node(self, run_id: str, turn: Turn, kind: str, data: dict[str, Any]) -> list[AgentRunResult]:
        if data.get("node_type") in SILENT_NODE_TYPES:
            return []
        call_id = str(data.get("id") or data.get("node_id") or "node")
        name = str(data.get("title") or data.get("node_type") or "node")
        results: list[AgentRunResult] = []
        if call_id not in turn.tools_started:
            turn.tools_started[call_id] = name
            inputs = data.get("inputs")
            results.append(
                AgentRunResult.tool_call_started(run_id, call_id, name, inputs if isinstance(inputs, dict) else {})
            )
        if kind == "node_finished" and call_id not in turn.tools_completed:
            turn.tools_completed.add(call_id)
            error = data.get("error") or (None if data.get("status") in (None, "succeeded") else str(data["status"]))
            results.append(
                AgentRunResult.tool_call_completed(
                    run_id, call_id, name, _clip(data.get("outputs")), error=str(error) if error else None
                )
            )
        return results

    def _file(self, settings: DifySettings, turn: Turn, payload: dict[str, Any]) -> None:
        if payload.get("belongs_to", "assistant") != "assistant" or not isinstance(payload.get("url"), str):
            return
        url = payload["url"]
        if not url.startswith(("http://", "https://")):
            # Dify gives paths relative to its site, which is the API base without /v1.
            url = settings.base_url.removesuffix("/v1") + "/" + url.lstrip("/")
        if payload.get("type") == "image":
            turn.files.append({"type": "image_url", "image_url": url})
        else:
            turn.files.append({"type": "file", "file_url": url})

    def _finish(
        self,
        ctx: AgentRunContext,
        settings: DifySettings,
        platform: Platform,
        turn: Turn,
        sent_conversation_id: str | None,
    ) -> list[AgentRunResult]:
        run_id = ctx.run_id
        results: list[AgentRunResult] = []
        # Only an id Dify issued in this answer is kept for the next turn.
        if not settings.is_workflow and turn.conversation_id and turn.conversation_id != sent_conversation_id:
            results.append(AgentRunResult.state_updated(run_id, STATE_SCOPE, CONVERSATION_ID_KEY, turn.conversation_id))
        text = "".join(turn.text)
        if turn.workflow_output is not None:
            text = strip_think(turn.workflow_output) if settings.remove_think else turn.workflow_output
        text = text.strip() if settings.remove_think else text
        if not text.strip() and not turn.files:
            return [*results, platform.empty_output().to_result(run_id)]
        content: str | list[dict[str, Any]] = text
        if turn.files:
            content = [*([{"type": "text", "text": text}] if text.strip() else []), *turn.files]
        results.append(AgentRunResult.message_completed(run_id, content))
        metadata: dict[str, Any] = {}
        if turn.citations:
            metadata["citations"] = turn.citations
        if turn.conversation_id and not settings.is_workflow:
            metadata["dify_conversation_id"] = turn.conversation_id
        results.append(AgentRunResult.run_completed(run_id, usage=turn.usage, metadata=metadata or None))
        return results

    async def _stop(self, ctx: AgentRunContext, settings: DifySettings, platform: Platform, turn: Turn) -> None:
        """Ask Dify to stop generating (best effort)."""
        if not turn.task_id:
            return
        path = f"workflows/tasks/{turn.task_id}/stop" if settings.is_workflow else f"chat-messages/{turn.task_id}/stop"
        await stop_request(
            platform,
            f"{settings.base_url}/{path}",
            run_id=ctx.run_id,
            json={"user": platform_user(ctx)},
            headers=settings.headers,
        )


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > TOOL_RESULT_CHARS:
        return value[:TOOL_RESULT_CHARS] + "…"
    if not isinstance(value, str) and value is not None:
        text = json.dumps(value, ensure_ascii=False, default=str)
        return value if len(text) <= TOOL_RESULT_CHARS else text[:TOOL_RESULT_CHARS] + "…"
    return value


def _citation(resource: Any) -> dict[str, Any]:
    if not isinstance(resource, dict):
        return {}
    citation = {
        key: resource.get(key)
        for key in ("position", "dataset_id", "dataset_name", "document_id", "document_name", "segment_id", "score")
        if resource.get(key) is not None
    }
    content = resource.get("content")
    if isinstance(content, str):
        citation["content"] = content[:CITATION_CONTENT_CHARS]
    return citation


def _workflow_output(outputs: Any) -> str:
    if isinstance(outputs, str):
        return outputs
    if not isinstance(outputs, dict) or not outputs:
        return ""
    for key in WORKFLOW_OUTPUT_KEYS:
        if isinstance(outputs.get(key), str):
            return str(outputs[key])
    strings = [value for value in outputs.values() if isinstance(value, str)]
    if len(outputs) == 1 and strings:
        return strings[0]
    return json.dumps(outputs, ensure_ascii=False)
