"""The langflow-agent runner: one run is one call of a Langflow flow, `POST /api/v1/run/{flow_id}`.

When the reply surface can stream (`ctx.delivery.supports_streaming`) the flow is run with `?stream=true`
and Langflow's events become results — `token` → `message.delta`, `add_message` (from the flow, not the
user) → the reply if no token came, `end` → the reply from the run's outputs, `error` → `run.failed`
`langflow.error`; otherwise with `?stream=false`, and the reply is read from the outputs JSON and sent as one
`message.completed`. The request carries `input_value`, `input_type`, `output_type`, `session_id` and the
configured `tweaks`.

Langflow sessions are named by the caller: the session id is this runner's (`langbot-<uuid>`), created on
a conversation's first turn and kept in conversation state under `external.session_id` before Langflow is
called — Langflow stores the user's message in the session even when the run then fails, so the next turn
must continue that session —, and the flow's memory components see the conversation; when Langflow reports
another id, that one is kept. A cancelled run closes the HTTP stream (the run API has no cancel endpoint).
Config field names are those of LangBot's `ai.langflow-api`.

A component that fails is a failure of the flow, reported the same way whether the run streamed or not:
`langflow.error`, not retryable (it fails again), with Langflow's message — streamed as an `error` event,
not streamed as a 500 whose `detail` is the JSON text of Langflow's exception body (`{"message": ...}`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from langbot_sdk.external import (
    ANSWER_MAX_BYTES,
    DEFAULT_TIMEOUT,
    SESSION_ID_KEY,
    STATE_SCOPE,
    ExternalAgentRunner,
    ExternalRunnerError,
    Platform,
    RunnerConfig,
    json_answer,
    stored_text,
    streaming_request,
    text_only_input,
    usage_normalized,
)
from langbot_sdk.protocol import AgentRunContext, AgentRunResult

logger = logging.getLogger(__name__)

RESPONSE_MAX_BYTES = ANSWER_MAX_BYTES  # LangBot's limit on a Langflow answer, 16 MiB
MACHINE_SENDERS = frozenset({"Machine", "AI"})
FAILURE_MESSAGE_MAX_CHARS = 500  # as much of Langflow's message as a failure carries (no traceback)


@dataclass(frozen=True)
class LangflowSettings:
    base_url: str
    api_key: str
    flow_id: str
    input_type: str
    output_type: str
    tweaks: dict[str, Any]
    timeout: float

    @property
    def headers(self) -> dict[str, str]:
        return {"x-api-key": self.api_key}


def read_settings(config: dict[str, Any], platform: Platform) -> LangflowSettings:
    reader = RunnerConfig(config, platform)
    return LangflowSettings(
        base_url=reader.url("base-url"),
        api_key=reader.secret("api-key"),
        flow_id=reader.required_text("flow-id"),
        input_type=reader.text("input-type", "chat").strip() or "chat",
        output_type=reader.text("output-type", "chat").strip() or "chat",
        tweaks=_tweaks(config.get("tweaks"), platform),
        timeout=reader.seconds("timeout", DEFAULT_TIMEOUT),
    )


def _tweaks(value: Any, platform: Platform) -> dict[str, Any]:
    """`tweaks` as an object; LangBot stored it as JSON text (`"{}"`), the form may give the object."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise platform.config_invalid("tweaks", "is not valid JSON") from None
    if not isinstance(value, dict):
        raise platform.config_invalid("tweaks", "must be a JSON object")
    return value


@dataclass
class LangflowPlatform(Platform):
    """Langflow's failures: a 500 carrying Langflow's exception body is the flow's own failure."""

    @classmethod
    def of(cls, platform: Platform) -> LangflowPlatform:
        # The same set of secrets: what either redacts, both redact.
        return cls(platform.name, label=platform.label, secrets=platform.secrets)

    def http_error(self, status: int, body: bytes, *, headers: Mapping[str, str] | None = None) -> ExternalRunnerError:
        message = _flow_failure_message(body) if status == 500 else None
        if message is None:
            return super().http_error(status, body, headers=headers)
        return self.stream_error(message, status=status)


@dataclass
class Turn:
    """What one flow run has produced so far."""

    session_id: str | None = None
    tokens: list[str] = field(default_factory=list)
    flow_messages: list[str] = field(default_factory=list)
    output: str = ""
    usage: dict[str, Any] | None = None


class LangflowAgentRunner(ExternalAgentRunner):
    platform_name = "langflow"
    platform_label = "Langflow"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        platform = LangflowPlatform.of(platform)
        settings = read_settings(ctx.config, platform)
        text = text_only_input(ctx, platform, "Langflow flows take text only")
        stored = await stored_text(self.run_api(ctx), SESSION_ID_KEY)
        session_id = stored or f"langbot-{uuid.uuid4()}"
        if session_id != stored:
            # Kept before the call: a run that fails has still opened the session in Langflow.
            yield AgentRunResult.state_updated(ctx.run_id, STATE_SCOPE, SESSION_ID_KEY, session_id)
            stored = session_id
        turn = Turn()
        stream = ctx.delivery.supports_streaming
        async with streaming_request(
            platform,
            "POST",
            f"{settings.base_url}/api/v1/run/{settings.flow_id}",
            timeout=settings.timeout,
            headers=settings.headers,
            params={"stream": "true" if stream else "false"},
            json=_request_body(settings, text, session_id),
        ) as response:
            if stream:
                async for result in self._events(ctx.run_id, platform, turn, response):
                    yield result
            else:
                answer = await json_answer(platform, response, max_bytes=RESPONSE_MAX_BYTES)
                self._outputs(turn, answer if isinstance(answer, dict) else {})
        for result in self._finish(ctx.run_id, platform, turn, stored, session_id):
            yield result

    async def _events(
        self, run_id: str, platform: Platform, turn: Turn, response: httpx.Response
    ) -> AsyncIterator[AgentRunResult]:
        async for event in _stream_events(platform, response):
            kind, data = event.get("event"), event.get("data")
            data = data if isinstance(data, dict) else {}
            if kind == "token":
                chunk = data.get("chunk")
                if isinstance(chunk, str) and chunk:
                    turn.tokens.append(chunk)
                    yield AgentRunResult.message_delta(run_id, chunk)
            elif kind == "add_message":
                self._message(turn, data)
            elif kind == "end":
                result = data.get("result")
                self._outputs(turn, result if isinstance(result, dict) else {})
            elif kind == "error":
                raise platform.stream_error(_error_text(data))

    def _message(self, turn: Turn, message: dict[str, Any]) -> None:
        if isinstance(message.get("session_id"), str) and message["session_id"]:
            turn.session_id = message["session_id"]
        if message.get("sender") not in MACHINE_SENDERS:
            return
        properties = message.get("properties")
        if isinstance(properties, dict) and isinstance(properties.get("usage"), dict):
            turn.usage = _usage(properties["usage"]) or turn.usage
        text = message.get("text")
        if isinstance(text, str) and text.strip():
            turn.flow_messages.append(text)

    def _outputs(self, turn: Turn, result: dict[str, Any]) -> None:
        if isinstance(result.get("session_id"), str) and result["session_id"]:
            turn.session_id = result["session_id"]
        turn.output = _output_text(result.get("outputs")) or turn.output
        for message in _output_messages(result.get("outputs")):
            properties = message.get("properties")
            if isinstance(properties, dict) and isinstance(properties.get("usage"), dict):
                turn.usage = _usage(properties["usage"]) or turn.usage

    def _finish(
        self, run_id: str, platform: Platform, turn: Turn, stored: str | None, sent: str
    ) -> list[AgentRunResult]:
        results: list[AgentRunResult] = []
        session_id = turn.session_id or sent
        if session_id != stored:
            results.append(AgentRunResult.state_updated(run_id, STATE_SCOPE, SESSION_ID_KEY, session_id))
        text = turn.output or "".join(turn.tokens) or (turn.flow_messages[-1] if turn.flow_messages else "")
        if not text.strip():
            return [*results, platform.empty_output("no chat output in the flow's result").to_result(run_id)]
        results.append(AgentRunResult.message_completed(run_id, text))
        results.append(
            AgentRunResult.run_completed(run_id, usage=turn.usage, metadata={"langflow_session_id": session_id})
        )
        return results


def _request_body(settings: LangflowSettings, text: str, session_id: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "input_value": text,
        "input_type": settings.input_type,
        "output_type": settings.output_type,
        "session_id": session_id,
    }
    if settings.tweaks:
        body["tweaks"] = settings.tweaks
    return body


async def _stream_events(platform: Platform, response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Langflow's streamed events: one JSON object per line (blank lines between them). Some proxies and
    versions frame them as server-sent events, so a `data:` prefix is taken off and `event:`/comment lines
    are skipped."""
    seen = 0
    async for line in response.aiter_lines():
        seen += len(line)
        if seen > RESPONSE_MAX_BYTES:
            raise platform.error("protocol_error", f"Langflow's stream is longer than {RESPONSE_MAX_BYTES} bytes")
        line = line.strip()
        if line.startswith("data:"):
            line = line[len("data:") :].strip()
        if not line or line.startswith((":", "event:", "id:")):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            logger.warning("skipping a Langflow stream line that is not JSON (%d characters)", len(line))
            continue
        if isinstance(value, dict):
            yield value


def _component_outputs(outputs: Any) -> list[dict[str, Any]]:
    """The component results of a run's `outputs`: `[{inputs, outputs: [component result, ...]}, ...]`."""
    found: list[dict[str, Any]] = []
    for run_output in outputs if isinstance(outputs, list) else []:
        for component in (run_output.get("outputs") if isinstance(run_output, dict) else None) or []:
            if isinstance(component, dict):
                found.append(component)
    return found


def _output_text(outputs: Any) -> str:
    """The reply in a run's outputs, where Langflow's chat output components put it (newest layout first)."""
    for component in _component_outputs(outputs):
        results = component.get("results")
        message = results.get("message") if isinstance(results, dict) else None
        if isinstance(message, dict):
            for candidate in (message.get("text"), (message.get("data") or {}).get("text")):
                if isinstance(candidate, str) and candidate.strip():
                    return candidate
        inner = component.get("outputs")
        inner_message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(inner_message, dict) and str(inner_message.get("message") or "").strip():
            return str(inner_message["message"])
        for item in component.get("messages") or []:
            if isinstance(item, dict) and isinstance(item.get("message"), str) and item["message"].strip():
                return str(item["message"])
        artifacts = component.get("artifacts")
        if isinstance(artifacts, dict) and isinstance(artifacts.get("message"), str) and artifacts["message"].strip():
            return str(artifacts["message"])
    return ""


def _output_messages(outputs: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for component in _component_outputs(outputs):
        results = component.get("results")
        message = results.get("message") if isinstance(results, dict) else None
        if isinstance(message, dict):
            messages.append(message)
    return messages


def _usage(raw: dict[str, Any]) -> dict[str, Any] | None:
    if "input_tokens" in raw or "output_tokens" in raw:
        return usage_normalized(raw, source="langflow", prompt_key="input_tokens", completion_key="output_tokens")
    return usage_normalized(raw, source="langflow")


def _flow_failure_message(body: bytes) -> str | None:
    """The message of Langflow's exception body — `{"detail": "<JSON text of {message, traceback, ...}>"}`,
    what the run API answers with 500 when a component fails — or None for any other answer."""
    try:
        detail = json.loads(body).get("detail")
        exception_body = json.loads(detail) if isinstance(detail, str) else None
    except (ValueError, AttributeError):
        return None
    message = exception_body.get("message") if isinstance(exception_body, dict) else None
    if isinstance(message, list):
        message = "; ".join(str(part) for part in message)
    return message.strip()[:FAILURE_MESSAGE_MAX_CHARS] if isinstance(message, str) and message.strip() else None


def _error_text(data: dict[str, Any]) -> str:
    for key in ("error", "text", "message", "detail"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return "unknown error"
