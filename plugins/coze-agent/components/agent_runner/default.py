"""The coze-agent runner: one run is one chat with a Coze bot through `POST /v3/chat`, streamed back as results.

The user's turn is sent as one `additional_messages` entry: plain text, or, when the input has files, an
`object_string` message whose parts are the text and the files uploaded first with `POST /v1/files/upload`
(read through the host's artifact API). Coze's server-sent events become results:

* `conversation.chat.created` / `.in_progress` → the chat and conversation ids Coze issued;
* `conversation.message.delta` (answer) → `message.delta`; `reasoning_content` is wrapped in `<think>…</think>`
  as LangBot showed it;
* `conversation.message.completed` → a `function_call` / `tool_response` pair becomes `tool.call.started` /
  `tool.call.completed`; `follow_up` suggestions go to `run.completed` metadata; an `answer` is the reply
  when no delta carried it;
* `conversation.chat.completed` → usage (normalized); `conversation.chat.failed`, `.requires_action` and
  `error` → `run.failed` `coze.error`; `done` ends the answer.

Coze's conversation id is kept in conversation state under `external.conversation_id`; only an id Coze issued
is stored and sent back (as the `conversation_id` query parameter), and one Coze no longer knows is dropped
and the turn retried once as a new conversation. A cancelled (or timed-out) run calls `POST /v3/chat/cancel`
and closes the HTTP stream. Config field names are those of LangBot's `ai.coze-api`.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from langbot_sdk.external import (
    CONVERSATION_ID_KEY,
    DEFAULT_TIMEOUT,
    ERROR_BODY_MAX_BYTES,
    STATE_SCOPE,
    ConversationGoneError,
    ExternalAgentRunner,
    ExternalRunnerError,
    Platform,
    RunnerConfig,
    continued_or_restarted,
    id_text,
    input_file_content,
    input_files,
    input_text,
    json_answer,
    json_object,
    platform_user,
    read_limited,
    sse_events,
    stop_request,
    stored_text,
    streaming_request,
    usage_normalized,
)
from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy

DEFAULT_API_BASE = "https://api.coze.cn"
UPLOAD_MAX_BYTES = 10 * 1024 * 1024  # the limit LangBot applied to Coze uploads
TOOL_RESULT_CHARS = 4000
# Coze's codes for a conversation it does not know (or that belongs to another bot or user).
CONVERSATION_GONE_CODES = frozenset({"4200", "4015", "4016"})


@dataclass(frozen=True)
class CozeSettings:
    api_key: str
    bot_id: str
    api_base: str
    auto_save_history: bool
    timeout: float

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


def read_settings(config: dict[str, Any], platform: Platform) -> CozeSettings:
    reader = RunnerConfig(config, platform)
    api_key = reader.secret("api-key")
    bot_id = reader.required_text("bot-id")
    api_base = reader.optional_url("api-base", DEFAULT_API_BASE)
    return CozeSettings(
        api_key=api_key,
        bot_id=bot_id,
        api_base=api_base,
        auto_save_history=reader.flag("auto-save-history", True),
        timeout=reader.seconds("timeout", DEFAULT_TIMEOUT),
    )


@dataclass
class Turn:
    """What one streamed chat has produced so far."""

    chat_id: str | None = None
    conversation_id: str | None = None
    text: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    thinking: bool = False
    usage: dict[str, Any] | None = None
    follow_ups: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """Started calls not yet answered, in order: (call id, tool name)."""
    done: bool = False


class CozeAgentRunner(ExternalAgentRunner):
    platform_name = "coze"
    platform_label = "Coze"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        settings = read_settings(ctx.config, platform)
        stored = await stored_text(api, CONVERSATION_ID_KEY)
        message = await self._user_message(ctx, api, settings, platform)
        turn = functools.partial(self._chat, ctx, settings, platform, message)
        async for result in continued_or_restarted(turn, stored, ctx=ctx):
            yield result

    # -- the user's message ---------------------------------------------------------------------------

    async def _user_message(
        self, ctx: AgentRunContext, api: AgentRunAPIProxy, settings: CozeSettings, platform: Platform
    ) -> dict[str, Any]:
        text = input_text(ctx)
        files = input_files(ctx)
        if not files:
            if not text.strip():
                raise platform.error("empty_input", "the input has no text and no file to send to Coze")
            return {"role": "user", "content": text, "content_type": "text"}
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
        for file in files:
            upload = await input_file_content(api, platform, file, max_bytes=UPLOAD_MAX_BYTES)
            file_id = await self._upload(settings, platform, upload.name, upload.mime_type, upload.content)
            kind = "image" if upload.mime_type.startswith("image/") else "file"
            parts.append({"type": kind, "file_id": file_id})
        return {"role": "user", "content": json.dumps(parts, ensure_ascii=False), "content_type": "object_string"}

    async def _upload(
        self, settings: CozeSettings, platform: Platform, name: str, mime_type: str, content: bytes
    ) -> str:
        async with streaming_request(
            platform,
            "POST",
            f"{settings.api_base}/v1/files/upload",
            timeout=settings.timeout,
            headers=settings.headers,
            files={"file": (name, content, mime_type)},
        ) as response:
            answer = json_object(await json_answer(platform, response))
        refusal = _coze_refusal(platform, answer)
        if refusal is not None:
            raise refusal
        data = answer.get("data")
        file_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(file_id, str | int) or not str(file_id):
            raise platform.error("protocol_error", "Coze's upload answer has no file id")
        return str(file_id)

    # -- the chat -------------------------------------------------------------------------------------

    async def _chat(
        self,
        ctx: AgentRunContext,
        settings: CozeSettings,
        platform: Platform,
        message: dict[str, Any],
        conversation_id: str | None,
    ) -> AsyncIterator[AgentRunResult]:
        body = {
            "bot_id": settings.bot_id,
            "user_id": platform_user(ctx),
            "stream": True,
            "auto_save_history": settings.auto_save_history,
            "additional_messages": [message],
        }
        params = {"conversation_id": conversation_id} if conversation_id else {}
        turn = Turn()
        try:
            async with streaming_request(
                platform,
                "POST",
                f"{settings.api_base}/v3/chat",
                timeout=settings.timeout,
                headers=settings.headers,
                json=body,
                params=params,
            ) as response:
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    # Coze refuses with a JSON body (`{"code", "msg"}`) and HTTP 200.
                    answer = json_object(await read_limited(response, ERROR_BODY_MAX_BYTES))
                    if conversation_id and str(answer.get("code")) in CONVERSATION_GONE_CODES:
                        raise ConversationGoneError
                    raise _coze_refusal(platform, answer) or platform.error(
                        "protocol_error", "Coze answered neither a stream nor an error"
                    )
                async for event in sse_events(response):
                    # `done` carries the bare string "[DONE]" (no object); a self-hosted Coze may send no data.
                    data = json_object(event.data)
                    for result in self._on_event(ctx.run_id, platform, turn, event.event, data):
                        yield result
                    if turn.done:
                        break
        except asyncio.CancelledError:
            await self._cancel(ctx, settings, platform, turn)
            raise
        except ExternalRunnerError as exc:
            if exc.code == "coze.timeout":
                await self._cancel(ctx, settings, platform, turn)
            raise
        for result in self._finish(ctx.run_id, platform, turn, conversation_id):
            yield result

    def _on_event(
        self, run_id: str, platform: Platform, turn: Turn, kind: str, data: dict[str, Any]
    ) -> list[AgentRunResult]:
        if kind in ("conversation.chat.created", "conversation.chat.in_progress"):
            turn.chat_id = id_text(data.get("id")) or turn.chat_id
            turn.conversation_id = id_text(data.get("conversation_id")) or turn.conversation_id
        elif kind == "conversation.message.delta":
            return self._delta(run_id, turn, data)
        elif kind == "conversation.message.completed":
            return self._message(run_id, turn, data)
        elif kind == "conversation.chat.completed":
            turn.conversation_id = id_text(data.get("conversation_id")) or turn.conversation_id
            turn.usage = usage_normalized(
                data.get("usage"),
                source="coze",
                prompt_key="input_count",
                completion_key="output_count",
                total_key="token_count",
            )
        elif kind == "conversation.chat.failed":
            error = data.get("last_error") or {}
            raise platform.stream_error(
                str(error.get("msg") or "the chat failed"), platform_code=id_text(error.get("code")) or None
            )
        elif kind == "conversation.chat.requires_action":
            raise platform.stream_error("the bot asked the caller to run a local plugin, which is not supported")
        elif kind == "error":
            raise platform.stream_error(
                str(data.get("msg") or data.get("message") or "unknown error"),
                platform_code=id_text(data.get("code")) or None,
            )
        elif kind == "done" or kind.endswith(".done"):
            turn.done = True
        return []

    def _delta(self, run_id: str, turn: Turn, data: dict[str, Any]) -> list[AgentRunResult]:
        if data.get("type", "answer") != "answer":
            return []
        piece = ""
        reasoning = data.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            piece = reasoning if turn.thinking else "<think>\n" + reasoning
            turn.thinking = True
        content = data.get("content")
        if isinstance(content, str) and content:
            if turn.thinking:
                piece += "\n</think>\n"
                turn.thinking = False
            piece += content
        if not piece:
            return []
        turn.text.append(piece)
        return [AgentRunResult.message_delta(run_id, piece)]

    def _message(self, run_id: str, turn: Turn, data: dict[str, Any]) -> list[AgentRunResult]:
        kind = data.get("type")
        content = data.get("content")
        if kind == "answer" and isinstance(content, str):
            turn.answers.append(content)
        elif kind == "follow_up" and isinstance(content, str) and content:
            turn.follow_ups.append(content)
        elif kind == "function_call":
            call = json_object(content if isinstance(content, str) else "")
            name = str(call.get("name") or "tool")
            arguments = call.get("arguments")
            call_id = id_text(data.get("id")) or f"call-{len(turn.tool_calls) + 1}"
            turn.tool_calls.append((call_id, name))
            return [
                AgentRunResult.tool_call_started(
                    run_id, call_id, name, arguments if isinstance(arguments, dict) else {}
                )
            ]
        elif kind == "tool_response" and turn.tool_calls:
            call_id, name = turn.tool_calls.pop(0)
            return [AgentRunResult.tool_call_completed(run_id, call_id, name, _clip(content))]
        return []

    def _finish(
        self, run_id: str, platform: Platform, turn: Turn, sent_conversation_id: str | None
    ) -> list[AgentRunResult]:
        results: list[AgentRunResult] = []
        # Only an id Coze issued in this answer is kept for the next turn.
        if turn.conversation_id and turn.conversation_id != sent_conversation_id:
            results.append(AgentRunResult.state_updated(run_id, STATE_SCOPE, CONVERSATION_ID_KEY, turn.conversation_id))
        if turn.thinking:
            turn.text.append("\n</think>\n")
            turn.thinking = False
            results.append(AgentRunResult.message_delta(run_id, "\n</think>\n"))
        text = "".join(turn.text) if turn.text else "\n\n".join(turn.answers)
        if not text.strip():
            return [*results, platform.empty_output().to_result(run_id)]
        results.append(AgentRunResult.message_completed(run_id, text))
        metadata: dict[str, Any] = {}
        if turn.conversation_id:
            metadata["coze_conversation_id"] = turn.conversation_id
        if turn.chat_id:
            metadata["coze_chat_id"] = turn.chat_id
        if turn.follow_ups:
            metadata["follow_up"] = turn.follow_ups
        results.append(AgentRunResult.run_completed(run_id, usage=turn.usage, metadata=metadata or None))
        return results

    async def _cancel(self, ctx: AgentRunContext, settings: CozeSettings, platform: Platform, turn: Turn) -> None:
        """Ask Coze to cancel the chat (best effort)."""
        if not turn.chat_id or not turn.conversation_id:
            return
        await stop_request(
            platform,
            f"{settings.api_base}/v3/chat/cancel",
            run_id=ctx.run_id,
            json={"chat_id": turn.chat_id, "conversation_id": turn.conversation_id},
            headers=settings.headers,
        )


def _coze_refusal(platform: Platform, answer: dict[str, Any]) -> ExternalRunnerError | None:
    """The failure of a JSON answer whose `code` is not 0, else None."""
    return platform.refusal(answer, code_key="code", message_keys=("msg", "message"))


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > TOOL_RESULT_CHARS:
        return value[:TOOL_RESULT_CHARS] + "…"
    return value
