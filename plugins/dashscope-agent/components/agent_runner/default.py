"""The dashscope-agent runner: one run is one call of an Aliyun Model Studio (DashScope) app,
`POST {base}/apps/{app_id}/completion`.

Agent and workflow apps take the input's text as `input.prompt` and the session id DashScope issued on an
earlier turn as `input.session_id` (kept in conversation state under `external.session_id`; only an id
DashScope issued is stored). When the reply surface can stream, the call asks for server-sent events
(`X-DashScope-SSE: enable`, `incremental_output: true`; workflow apps with `flow_stream_mode:
message_format`) and each event's new text becomes a `message.delta`; otherwise the answer is one JSON object.

Knowledge-base apps mark citations as `<ref>[n]</ref>` and list the documents in `output.doc_references`.
As LangBot did, a marker is replaced by `(<quote> <document name>)` with the configured quote prefix; the
documents the text does not cite inline are appended after it, one line led by the quote prefix. Markers are
held out of the deltas (the document is known only later); the final message carries the rendered text, and
`run.completed` the references as `citations`. Usage (`usage.models[]` or `usage.input_tokens`/`output_tokens`)
is normalized. A cancelled run closes the HTTP stream (DashScope has no cancel endpoint). Config field
names are those of LangBot's `ai.dashscope-app-api`. Workflow apps get, as in LangBot, its pipeline variables
as `input.biz_params` (`user_message_text`, `session_id`, `conversation_id`, `msg_create_time`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from langbot_sdk.external import (
    DEFAULT_TIMEOUT,
    SESSION_ID_KEY,
    STATE_SCOPE,
    ExternalAgentRunner,
    ExternalRunnerError,
    Platform,
    RunnerConfig,
    json_answer,
    json_object,
    platform_user,
    sse_events,
    stored_text,
    streaming_request,
    text_only_input,
    usage_normalized,
)
from langbot_sdk.protocol import AgentRunContext, AgentRunResult

APP_TYPES = ("agent", "workflow")
DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/api/v1"
DEFAULT_QUOTE = "参考资料来自:"
REFERENCES_MAX = 1024  # LangBot's cap on the references of one answer
CITATION_TEXT_CHARS = 500
REF_MARKER = re.compile(r"<ref>\[(.*?)\]</ref>")
REF_OPEN = "<ref>"
REF_CLOSE = "</ref>"


@dataclass(frozen=True)
class DashScopeSettings:
    app_type: str
    api_key: str
    app_id: str
    quote: str
    base_url: str
    timeout: float

    def headers(self, *, stream: bool) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        if stream:
            headers["X-DashScope-SSE"] = "enable"
        return headers


def read_settings(config: dict[str, Any], platform: Platform) -> DashScopeSettings:
    reader = RunnerConfig(config, platform)
    base_url = reader.optional_url("base-url", DEFAULT_BASE_URL)
    return DashScopeSettings(
        app_type=reader.choice("app-type", APP_TYPES, "agent"),
        api_key=reader.secret("api-key"),
        app_id=reader.required_text("app-id"),
        # LangBot wrote the prefix under both names; the older spelling wins when it is set.
        quote=reader.text("references-quote") or reader.text("references_quote", DEFAULT_QUOTE),
        base_url=base_url,
        timeout=reader.seconds("timeout", DEFAULT_TIMEOUT),
    )


class RefMarkerFilter:
    """Removes `<ref>[n]</ref>` markers from text that arrives in pieces; a marker split across pieces is held
    back until it is complete."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str) -> str:
        buffer = REF_MARKER.sub("", self._pending + text)
        open_at = buffer.rfind(REF_OPEN)
        if open_at >= 0 and REF_CLOSE not in buffer[open_at:]:
            self._pending = buffer[open_at:]
            return buffer[:open_at]
        keep = next((size for size in range(len(REF_OPEN) - 1, 0, -1) if buffer.endswith(REF_OPEN[:size])), 0)
        self._pending = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def finish(self) -> str:
        rest, self._pending = self._pending, ""
        return rest


@dataclass
class Turn:
    """What one app call has produced so far."""

    session_id: str | None = None
    request_id: str | None = None
    text: list[str] = field(default_factory=list)
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] | None = None


class DashScopeAgentRunner(ExternalAgentRunner):
    platform_name = "dashscope"
    platform_label = "DashScope"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        settings = read_settings(ctx.config, platform)
        text = text_only_input(ctx, platform, "DashScope apps are sent text only")
        stored = await stored_text(self.run_api(ctx), SESSION_ID_KEY)
        stream = ctx.delivery.supports_streaming
        turn = Turn()
        async with streaming_request(
            platform,
            "POST",
            f"{settings.base_url}/apps/{settings.app_id}/completion",
            timeout=settings.timeout,
            headers=settings.headers(stream=stream),
            json=_request_body(settings, text, stored, stream=stream, variables=_variables(ctx, text, stored)),
        ) as response:
            if stream:
                async for result in self._events(ctx.run_id, platform, settings, turn, response):
                    yield result
            else:
                answer = await json_answer(platform, response)
                self._chunk(platform, settings, turn, answer if isinstance(answer, dict) else {}, stream=False)
        for result in self._finish(ctx.run_id, platform, settings, turn, stored):
            yield result

    async def _events(
        self,
        run_id: str,
        platform: Platform,
        settings: DashScopeSettings,
        turn: Turn,
        response: httpx.Response,
    ) -> AsyncIterator[AgentRunResult]:
        markers = RefMarkerFilter()
        async for event in sse_events(response):
            data = json_object(event.data)
            if not data:
                continue
            if event.event == "error":
                raise _stream_failure(platform, data)
            piece = self._chunk(platform, settings, turn, data, stream=True)
            visible = markers.feed(piece)
            if visible:
                yield AgentRunResult.message_delta(run_id, visible)
        tail = markers.finish()
        if tail:
            yield AgentRunResult.message_delta(run_id, tail)

    def _chunk(
        self, platform: Platform, settings: DashScopeSettings, turn: Turn, data: dict[str, Any], *, stream: bool
    ) -> str:
        """Take one answer (streamed chunk or whole) into the turn; returns its new text."""
        if data.get("code") and not data.get("output"):
            raise _stream_failure(platform, data)
        turn.request_id = data.get("request_id") or turn.request_id
        raw_output = data.get("output")
        output: dict[str, Any] = raw_output if isinstance(raw_output, dict) else {}
        if isinstance(output.get("session_id"), str) and output["session_id"]:
            turn.session_id = output["session_id"]
        for reference in (output.get("doc_references") or [])[:REFERENCES_MAX]:
            if isinstance(reference, dict) and reference.get("index_id") is not None:
                turn.references[str(reference["index_id"])] = reference
        turn.usage = _usage(data.get("usage")) or turn.usage
        piece = _text_of(output, workflow=settings.app_type == "workflow" and stream)
        if piece:
            turn.text.append(piece)
        return piece

    def _finish(
        self, run_id: str, platform: Platform, settings: DashScopeSettings, turn: Turn, stored: str | None
    ) -> list[AgentRunResult]:
        results: list[AgentRunResult] = []
        # Only a session id DashScope issued is kept for the next turn.
        if turn.session_id and turn.session_id != stored:
            results.append(AgentRunResult.state_updated(run_id, STATE_SCOPE, SESSION_ID_KEY, turn.session_id))
        text = _with_references("".join(turn.text), turn.references, settings.quote)
        if not text.strip():
            return [*results, platform.empty_output().to_result(run_id)]
        results.append(AgentRunResult.message_completed(run_id, text))
        metadata: dict[str, Any] = {}
        if turn.references:
            metadata["citations"] = [_citation(reference) for reference in turn.references.values()]
        if turn.session_id:
            metadata["dashscope_session_id"] = turn.session_id
        if turn.request_id:
            metadata["dashscope_request_id"] = turn.request_id
        results.append(AgentRunResult.run_completed(run_id, usage=turn.usage, metadata=metadata or None))
        return results


def _variables(ctx: AgentRunContext, text: str, session_id: str | None) -> dict[str, Any]:
    """Old LangBot's pipeline variables, which it passed to workflow apps as their parameters; its
    conversation id was DashScope's session id once there was one."""
    return {
        "user_message_text": text,
        "session_id": platform_user(ctx),
        "conversation_id": session_id or ctx.context.conversation_id or "",
        "msg_create_time": ctx.event.event_time or 0,
    }


def _request_body(
    settings: DashScopeSettings, text: str, session_id: str | None, *, stream: bool, variables: dict[str, Any]
) -> dict[str, Any]:
    app_input: dict[str, Any] = {"prompt": text}
    if session_id:
        app_input["session_id"] = session_id
    if settings.app_type == "workflow":
        app_input["biz_params"] = variables
    parameters: dict[str, Any] = {"incremental_output": stream}
    if settings.app_type == "workflow" and stream:
        parameters["flow_stream_mode"] = "message_format"
    return {"input": app_input, "parameters": parameters, "debug": {}}


def _text_of(output: Mapping[str, Any], *, workflow: bool) -> str:
    if workflow:
        message = (output.get("workflow_message") or {}).get("message") or {}
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return content
    text = output.get("text")
    return text if isinstance(text, str) else ""


def _with_references(text: str, references: dict[str, dict[str, Any]], quote: str) -> str:
    """LangBot's rendering: `<ref>[n]</ref>` → `(<quote> <document name>)`; uncited documents appended."""
    cited: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        reference = references.get(match.group(1))
        if reference is None:
            return match.group(0)
        cited.add(match.group(1))
        return f"({quote} {_document_name(reference)})"

    rendered = REF_MARKER.sub(replace, text)
    uncited = [_document_name(ref) for key, ref in references.items() if key not in cited]
    if rendered.strip() and uncited:
        rendered = f"{rendered.rstrip()}\n\n{quote} {'; '.join(dict.fromkeys(uncited))}"
    return rendered


def _document_name(reference: Mapping[str, Any]) -> str:
    return str(reference.get("doc_name") or reference.get("title") or reference.get("doc_id") or "")


def _citation(reference: Mapping[str, Any]) -> dict[str, Any]:
    citation = {
        key: reference[key] for key in ("index_id", "doc_id", "doc_name", "title") if reference.get(key) is not None
    }
    if isinstance(reference.get("text"), str):
        citation["content"] = reference["text"][:CITATION_TEXT_CHARS]
    return citation


def _usage(raw: Any) -> dict[str, Any] | None:
    """`{models: [{input_tokens, output_tokens}, ...]}` (agent apps) or flat token counts, summed."""
    if not isinstance(raw, dict):
        return None
    models = raw.get("models")
    if isinstance(models, list) and models:
        totals = {"input_tokens": 0, "output_tokens": 0}
        for model in models:
            for key in totals:
                value = model.get(key) if isinstance(model, dict) else None
                if isinstance(value, int) and not isinstance(value, bool):
                    totals[key] += value
        raw = totals
    return usage_normalized(raw, source="dashscope", prompt_key="input_tokens", completion_key="output_tokens")


def _stream_failure(platform: Platform, data: Mapping[str, Any]) -> ExternalRunnerError:
    code = str(data.get("code") or "")
    retryable = code in ("Throttling", "Throttling.RateQuota", "InternalError", "ServiceUnavailable")
    return platform.stream_error(
        str(data.get("message") or code or "unknown error"),
        retryable=retryable,
        platform_code=code or None,
        request_id=data.get("request_id"),
    )
