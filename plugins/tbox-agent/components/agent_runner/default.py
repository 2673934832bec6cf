"""The tbox-agent runner: one run is one chat with an Ant Tbox (百宝箱) app, `POST {base}/api/chat`.

The request is Tbox's chat body — `appId`, `query` (the input's text), `userId`, `stream`, the
`conversationId` Tbox issued on an earlier turn (kept in conversation state under
`external.conversation_id`; only an id Tbox issued is stored), and `files` for input images uploaded first
with `POST {base}/api/file/upload`. The token goes as the `Authorization` header, as Tbox's SDK sends it.

Streamed (when the reply surface can stream), Tbox answers server-sent events: `event: message` whose data is
`{"type", "lane", "payload"}` with `payload` a JSON text — `chunk` carries `{conversationId, messageId, text}`
(→ `message.delta`), `thinking` the app's reasoning (`ext_data.text`, shown inside `<think>…</think>` as
LangBot showed it), `error` and `event: error` a failure (→ `run.failed` `tbox.error`), `end` the end;
`header`, `meta`, `charge`, `followup` and others carry nothing for the reply. Not streamed, Tbox answers
`{"errorCode", "errorMsg", "data": {conversationId, result: [{chunk}], reasoningContent: [{text}]}}`; an
`errorCode` other than "0" is a refusal. A cancelled run closes the HTTP stream (no cancel endpoint is
known). Tbox reports no token usage, so `run.completed` has none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from langbot_sdk.external import (
    CONVERSATION_ID_KEY,
    DEFAULT_TIMEOUT,
    STATE_SCOPE,
    ExternalAgentRunner,
    Platform,
    RunnerConfig,
    id_text,
    input_file_content,
    input_files,
    input_text,
    json_answer,
    json_object,
    platform_user,
    sse_events,
    stored_text,
    streaming_request,
)
from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.tbox.cn"
UPLOAD_MAX_BYTES = 10 * 1024 * 1024  # the limit LangBot applied to Tbox uploads


@dataclass(frozen=True)
class TboxSettings:
    api_key: str
    app_id: str
    base_url: str
    timeout: float

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": self.api_key}


def read_settings(config: dict[str, Any], platform: Platform) -> TboxSettings:
    reader = RunnerConfig(config, platform)
    api_key = reader.secret("api-key")
    app_id = reader.required_text("app-id")
    base_url = reader.optional_url("base-url", DEFAULT_BASE_URL)
    return TboxSettings(api_key, app_id, base_url, reader.seconds("timeout", DEFAULT_TIMEOUT))


@dataclass
class Turn:
    """What one chat has produced so far."""

    conversation_id: str | None = None
    message_id: str | None = None
    text: list[str] = field(default_factory=list)
    thinking: bool = False
    done: bool = False


class TboxAgentRunner(ExternalAgentRunner):
    platform_name = "tbox"
    platform_label = "Tbox"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        api = self.run_api(ctx)
        settings = read_settings(ctx.config, platform)
        text = input_text(ctx)
        images = await self._upload_images(ctx, api, settings, platform)
        if not text.strip() and not images:
            raise platform.error("empty_input", "the input has no text and no image to send to Tbox")
        stored = await stored_text(api, CONVERSATION_ID_KEY)
        stream = ctx.delivery.supports_streaming
        body: dict[str, Any] = {
            "appId": settings.app_id,
            "query": text,
            "userId": platform_user(ctx),
            "stream": stream,
        }
        if stored:
            body["conversationId"] = stored
        if images:
            body["files"] = [{"fileId": file_id, "type": "IMAGE"} for file_id in images]
        turn = Turn()
        async with streaming_request(
            platform,
            "POST",
            f"{settings.base_url}/api/chat",
            timeout=settings.timeout,
            headers=settings.headers,
            json=body,
        ) as response:
            if stream and "text/event-stream" in response.headers.get("content-type", ""):
                async for result in self._events(ctx.run_id, platform, turn, response):
                    yield result
            else:
                self._whole(platform, turn, await _read_json(platform, response))
        for result in self._finish(ctx.run_id, platform, turn, stored):
            yield result

    async def _upload_images(
        self, ctx: AgentRunContext, api: AgentRunAPIProxy, settings: TboxSettings, platform: Platform
    ) -> list[str]:
        file_ids: list[str] = []
        for file in input_files(ctx):
            if not (file.mime_type or "image/").startswith("image/"):
                logger.info("run %s: a non-image input file is not sent to Tbox", ctx.run_id)
                continue
            image = await input_file_content(api, platform, file, max_bytes=UPLOAD_MAX_BYTES, default_name="image")
            if not image.mime_type.startswith("image/"):
                logger.info("run %s: a non-image input file is not sent to Tbox", ctx.run_id)
                continue
            async with streaming_request(
                platform,
                "POST",
                f"{settings.base_url}/api/file/upload",
                timeout=settings.timeout,
                headers=settings.headers,
                files={"file": (image.name, image.content, image.mime_type)},
            ) as response:
                answer = _refusal_checked(platform, await _read_json(platform, response))
            file_id = answer.get("data")
            if not isinstance(file_id, str) or not file_id:
                raise platform.error("protocol_error", "Tbox's upload answer has no file id")
            file_ids.append(file_id)
        return file_ids

    async def _events(
        self, run_id: str, platform: Platform, turn: Turn, response: httpx.Response
    ) -> AsyncIterator[AgentRunResult]:
        async for event in sse_events(response):
            data = json_object(event.data)
            if event.event == "error":
                raise platform.stream_error(
                    str(data.get("description") or data.get("errorMsg") or data.get("message") or "unknown error"),
                    platform_code=str(data.get("errorCode") or data.get("code") or "") or None,
                )
            if event.event != "message":
                continue
            piece = self._message(platform, turn, data)
            if piece:
                turn.text.append(piece)
                yield AgentRunResult.message_delta(run_id, piece)
            if turn.done:
                break

    def _message(self, platform: Platform, turn: Turn, data: dict[str, Any]) -> str:
        kind = data.get("type")
        payload = json_object(data.get("payload"))
        if kind == "chunk":
            turn.conversation_id = id_text(payload.get("conversationId")) or turn.conversation_id
            turn.message_id = id_text(payload.get("messageId")) or turn.message_id
            text = payload.get("text")
            if not isinstance(text, str) or not text:
                return ""
            if turn.thinking:
                turn.thinking = False
                return "\n</think>\n" + text
            return text
        if kind == "thinking":
            thought = (payload.get("ext_data") or {}).get("text")
            if not isinstance(thought, str) or not thought:
                return ""
            opening = "" if turn.thinking else "<think>\n"
            turn.thinking = True
            return opening + thought
        if kind == "error":
            raise platform.stream_error(
                str(payload.get("description") or payload.get("errorMsg") or payload.get("message") or "unknown"),
                platform_code=str(payload.get("errorCode") or payload.get("code") or "") or None,
            )
        if kind == "end":
            turn.done = True
        return ""

    def _whole(self, platform: Platform, turn: Turn, answer: dict[str, Any]) -> None:
        data = _refusal_checked(platform, answer).get("data")
        data = data if isinstance(data, dict) else {}
        turn.conversation_id = id_text(data.get("conversationId")) or None
        turn.message_id = id_text(data.get("messageId")) or None
        reasoning = "".join(
            str(item.get("text") or "") for item in data.get("reasoningContent") or [] if isinstance(item, dict)
        )
        if reasoning:
            turn.text.append(f"<think>\n{reasoning}\n</think>\n")
        for item in data.get("result") or []:
            if isinstance(item, dict) and item.get("mediaType", "text") == "text":
                chunk = item.get("chunk")
                turn.text.append(chunk if isinstance(chunk, str) else json.dumps(chunk, ensure_ascii=False))

    def _finish(self, run_id: str, platform: Platform, turn: Turn, stored: str | None) -> list[AgentRunResult]:
        results: list[AgentRunResult] = []
        # Only an id Tbox issued in this answer is kept for the next turn.
        if turn.conversation_id and turn.conversation_id != stored:
            results.append(AgentRunResult.state_updated(run_id, STATE_SCOPE, CONVERSATION_ID_KEY, turn.conversation_id))
        if turn.thinking:
            turn.thinking = False
            turn.text.append("\n</think>\n")
        text = "".join(turn.text)
        answer = text.split("</think>")[-1] if "</think>" in text else text
        if not answer.strip():
            return [*results, platform.empty_output().to_result(run_id)]
        results.append(AgentRunResult.message_completed(run_id, text))
        metadata = {
            key: value
            for key, value in (("tbox_conversation_id", turn.conversation_id), ("tbox_message_id", turn.message_id))
            if value
        }
        results.append(AgentRunResult.run_completed(run_id, metadata=metadata or None))
        return results


def _refusal_checked(platform: Platform, answer: dict[str, Any]) -> dict[str, Any]:
    """The answer, unless its `errorCode` says Tbox refused (Tbox answers refusals with HTTP 200)."""
    refusal = platform.refusal(answer, code_key="errorCode", message_keys=("errorMsg",))
    if refusal is not None:
        raise refusal
    return answer


async def _read_json(platform: Platform, response: httpx.Response) -> dict[str, Any]:
    value = await json_answer(platform, response)
    if not isinstance(value, dict) or not value:
        raise platform.error("protocol_error", "Tbox's answer is not a JSON object")
    return value
