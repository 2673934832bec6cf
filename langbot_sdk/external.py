"""Shared pieces of runners that call an external agent platform (Dify, n8n, Coze, DashScope, Langflow, ...).

What belongs here is what every such adapter needs and nothing platform-specific:

* `ExternalAgentRunner`: the `AgentRunner` an adapter subclasses; it implements ``turn(ctx, platform)``,
  every `ExternalRunnerError` the turn raises ends the run as ``run.failed``, and a reply surface that
  cannot stream gets the reply once (``message.completed``, no ``message.delta``).
* `Platform`: one per adapter, named by its error-code prefix (``Platform("dify")``). It builds the
  failures every adapter reports (`ExternalRunnerError`, turned into ``run.failed`` by ``to_result``):
  ``<x>.config_invalid`` naming the field, ``<x>.timeout`` (retryable), ``<x>.empty_output``,
  ``<x>.http_error`` (a 4xx answer, non-retryable, with the platform's own message), ``<x>.rate_limited``
  (429) and ``<x>.unavailable`` (5xx) — both retryable —, ``<x>.connection_error`` (retryable) and
  ``<x>.error`` for a failure the platform reports inside a stream. Every message goes through
  ``redact``, which hides the secrets the config reader saw, so no credential reaches a log or a result.
* `RunnerConfig`: typed reading of ``ctx.config`` that fails with ``<x>.config_invalid`` naming the field.
* `stop_request`: the best-effort call asking a platform to stop what a cancelled or timed-out run started.
* `streaming_request`: an HTTP request whose response is read as a stream; a non-2xx answer raises the
  platform's error, transport failures and timeouts become the matching failures, and the connection is
  closed however the caller leaves — cancellation of the run included.
* `sse_events` (server-sent events, framed by httpx-sse) and `json_values` (newline-delimited or
  concatenated JSON) read such a response.
* `usage_normalized`: a platform's token counts as ``run.completed``'s usage.
* `input_text`, `input_files`, `artifact_bytes`, `input_file_content`: the current input and its files,
  read through ``api.artifacts`` so an adapter can upload them to its platform.
* `launcher_name`, `platform_user`: who the platform is told it talks to, named as old LangBot named it.
* `stored_text` / `stored_texts`: the ids an adapter keeps in conversation state between turns
  (`CONVERSATION_ID_KEY`, `SESSION_ID_KEY` in `STATE_SCOPE`); `continued_or_restarted` runs a turn in the
  stored conversation and, when the platform says it is gone (`ConversationGoneError`), once more in a new one.
* `text_only_input`: the input's text for a platform that takes nothing else.
* `json_answer` (a whole JSON answer, size-bounded), `read_limited`, `json_object`, `id_text`, and
  ``Platform.refusal`` for platforms that refuse with HTTP 200 and an error code in the JSON body.

Typical use::

    class AcmeAgentRunner(ExternalAgentRunner):
        platform_name, platform_label = "acme", "Acme"

        async def turn(self, ctx, platform):
            config = RunnerConfig(ctx.config, platform)
            url, key = config.url("base-url"), config.secret("api-key")
            async with streaming_request(platform, "POST", f"{url}/chat", timeout=60, json=body,
                                         headers={"Authorization": f"Bearer {key}"}) as response:
                async for event in sse_events(response):
                    yield ...
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import httpx_sse

from langbot_sdk.protocol import AgentAPIException, AgentRunContext, AgentRunResult, ArtifactMetadata, ResultType
from langbot_sdk.proxy import AgentRunAPIProxy
from langbot_sdk.runner import AgentRunner

__all__ = [
    "ANSWER_MAX_BYTES",
    "CONVERSATION_ID_KEY",
    "DEFAULT_TIMEOUT",
    "ERROR_BODY_MAX_BYTES",
    "SESSION_ID_KEY",
    "STATE_SCOPE",
    "ConversationGoneError",
    "ExternalAgentRunner",
    "ExternalRunnerError",
    "InputFile",
    "InputFileContent",
    "Platform",
    "RunnerConfig",
    "SSEEvent",
    "artifact_bytes",
    "continued_or_restarted",
    "id_text",
    "input_file_content",
    "input_files",
    "input_text",
    "json_answer",
    "json_object",
    "json_values",
    "launcher_name",
    "platform_user",
    "read_limited",
    "sse_events",
    "stop_request",
    "stored_text",
    "stored_texts",
    "streaming_request",
    "text_only_input",
    "usage_normalized",
]

logger = logging.getLogger(__name__)

ERROR_BODY_MAX_BYTES = 64 * 1024
"""How much of an error answer is read to find the platform's message."""
ANSWER_MAX_BYTES = 16 * 1024 * 1024
"""The largest whole (not streamed) answer `json_answer` reads by default."""
DEFAULT_TIMEOUT = 120.0
"""Seconds a call of the platform may take when the runner config sets no ``timeout`` (LangBot's default)."""
STATE_SCOPE = "conversation"
"""The state scope adapters keep the platform's ids in."""
STOP_TIMEOUT = 3.0
"""Seconds a `stop_request` may take: well inside the runtime's cancel grace."""
CONVERSATION_ID_KEY = "external.conversation_id"
"""State key of the conversation id the platform issued (or the adapter made)."""
SESSION_ID_KEY = "external.session_id"
"""State key of the session id the platform issued (or the adapter made)."""
MESSAGE_MAX_CHARS = 500
"""Longest platform message carried into ``run.failed``."""
REDACTED = "***"
DELTA = ResultType.MESSAGE_DELTA.value
_MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words


class ExternalRunnerError(Exception):
    """A failure of an external-platform run, reported as ``run.failed`` with these fields."""

    def __init__(
        self, code: str, message: str, *, retryable: bool = False, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.details: dict[str, Any] = dict(details or {})

    def to_result(self, run_id: str) -> AgentRunResult:
        return AgentRunResult.run_failed(
            run_id, self.code, self.message, retryable=self.retryable, details=self.details
        )


@dataclass
class Platform:
    """The adapter's platform: its error-code prefix and the secrets to keep out of messages."""

    name: str
    """Prefix of the error codes (``dify`` gives ``dify.timeout``) and the name shown in messages."""
    label: str = ""
    """Human name in messages (default: ``name``)."""
    secrets: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.label = self.label or self.name

    # -- redaction ----------------------------------------------------------------------------------

    def add_secret(self, value: str) -> None:
        """Hide ``value`` (and nothing shorter than 4 characters) in every message built from now on."""
        if len(value) >= _MIN_SECRET_CHARS:
            self.secrets.add(value)

    def redact(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text

    # -- the failures every adapter reports ----------------------------------------------------------

    def error(self, kind: str, message: str, *, retryable: bool = False, **details: Any) -> ExternalRunnerError:
        """``<name>.<kind>`` with a redacted message (details are caller-built and must hold no secret)."""
        return ExternalRunnerError(f"{self.name}.{kind}", self.redact(message), retryable=retryable, details=details)

    def config_invalid(self, field_name: str, problem: str) -> ExternalRunnerError:
        return self.error("config_invalid", f"runner config `{field_name}` {problem}", field=field_name)

    def timeout(self, seconds: float) -> ExternalRunnerError:
        return self.error(
            "timeout", f"{self.label} did not finish within {seconds:g} seconds", retryable=True, timeout=seconds
        )

    def empty_output(self, detail: str = "") -> ExternalRunnerError:
        suffix = f" ({detail})" if detail else ""
        return self.error("empty_output", f"{self.label} answered with no output{suffix}")

    def connection_error(self, exc: BaseException) -> ExternalRunnerError:
        return self.error("connection_error", f"cannot reach {self.label}: {type(exc).__name__}: {exc}", retryable=True)

    def stream_error(self, message: str, *, retryable: bool = False, **details: Any) -> ExternalRunnerError:
        """A failure the platform reported in the middle of an answer (an ``error`` event, ...)."""
        return self.error("error", f"{self.label} reported an error: {message}", retryable=retryable, **details)

    def http_error(self, status: int, body: bytes, *, headers: Mapping[str, str] | None = None) -> ExternalRunnerError:
        """The failure for a non-2xx answer: 429 and 5xx are retryable, any other status is not."""
        message = _platform_message(body) or f"HTTP {status}"
        details: dict[str, Any] = {"status": status}
        platform_code = _platform_code(body)
        if platform_code:
            details["platform_code"] = platform_code
        if status == 429:
            retry_after = (headers or {}).get("retry-after")
            if retry_after:
                details["retry_after"] = retry_after
            return self.error("rate_limited", f"{self.label} rate limit: {message}", retryable=True, **details)
        if status >= 500:
            return self.error("unavailable", f"{self.label} failed ({status}): {message}", retryable=True, **details)
        return self.error("http_error", f"{self.label} refused the request ({status}): {message}", **details)

    def refusal(
        self, answer: Mapping[str, Any], *, code_key: str, message_keys: Iterable[str]
    ) -> ExternalRunnerError | None:
        """The failure of a JSON answer whose ``code_key`` is present and not 0 (platforms such as Coze and
        Tbox refuse a request with HTTP 200 and such a body), else None: ``<x>.http_error``, not retryable,
        with the first non-empty of ``message_keys`` as the message and the code as ``platform_code``."""
        code = answer.get(code_key)
        if code is None or str(code) == "0":
            return None
        message = next((str(answer[key]) for key in message_keys if answer.get(key)), f"{code_key} {code}")
        return self.error("http_error", f"{self.label} refused the request: {message}", platform_code=str(code))


class ExternalAgentRunner(AgentRunner):
    """A runner that calls one external platform: ``run`` runs ``turn`` with the platform's `Platform`, and an
    `ExternalRunnerError` the turn raises ends the run as its ``run.failed`` (after what the turn yielded).

    When the reply surface cannot stream (``ctx.delivery.supports_streaming`` false: the platform's delivery
    cannot, or the binding turned streaming off) the turn's ``message.delta`` results are not sent, so the
    reply arrives once, as its ``message.completed`` — whether or not the platform itself streamed it."""

    platform_name: ClassVar[str]
    """`Platform.name`: the prefix of the run's error codes."""
    platform_label: ClassVar[str] = ""
    """`Platform.label`: the platform's name in messages (default: ``platform_name``)."""

    async def run(self, ctx: AgentRunContext) -> AsyncIterator[AgentRunResult]:
        platform = Platform(self.platform_name, label=self.platform_label)
        streams = ctx.delivery.supports_streaming
        try:
            async for result in self.turn(ctx, platform):
                if streams or result.type != DELTA:
                    yield result
        except ExternalRunnerError as exc:
            yield exc.to_result(ctx.run_id)

    def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        """One run's results; override with ``async def turn(self, ctx, platform): ... yield ...``."""
        raise NotImplementedError(f"{type(self).__name__} must implement turn(ctx, platform)")


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _platform_message(body: bytes) -> str:
    """The human message of an error body: ``message``, ``error.message``, ``error``, ``detail``, ``msg``
    of a JSON object, else the text itself (cut to 500 characters)."""
    data = _json_or_none(body)
    if isinstance(data, dict):
        nested = data.get("error")
        candidates = [
            data.get("message"),
            nested.get("message") if isinstance(nested, dict) else nested,
            data.get("detail"),
            data.get("msg"),
        ]
        for candidate in candidates:
            if isinstance(candidate, str) and candidate.strip():
                return candidate.strip()[:MESSAGE_MAX_CHARS]
    return body.decode("utf-8", errors="replace").strip()[:MESSAGE_MAX_CHARS]


def _platform_code(body: bytes) -> str | None:
    data = _json_or_none(body)
    if isinstance(data, dict):
        nested = data.get("error")
        for candidate in (data.get("code"), nested.get("code") if isinstance(nested, dict) else None):
            if isinstance(candidate, str | int) and not isinstance(candidate, bool) and str(candidate):
                return str(candidate)
    return None


# --- config ----------------------------------------------------------------------------------------


class RunnerConfig:
    """Typed reads of a runner's config; a missing or malformed value raises ``<x>.config_invalid``
    naming the field. ``secret`` values are registered with the platform for redaction."""

    def __init__(self, config: Mapping[str, Any], platform: Platform) -> None:
        self._config = config
        self._platform = platform

    def _raw(self, name: str) -> Any:
        value = self._config.get(name)
        return None if value == "" else value

    def text(self, name: str, default: str = "") -> str:
        """An optional string (surrounding whitespace kept); ``default`` when missing or empty."""
        value = self._raw(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._platform.config_invalid(name, "must be a string")
        return value

    def required_text(self, name: str) -> str:
        value = self.text(name).strip()
        if not value:
            raise self._platform.config_invalid(name, "is required")
        return value

    def secret(self, name: str, *, required: bool = True) -> str:
        value = self.text(name).strip()
        if required and not value:
            raise self._platform.config_invalid(name, "is required")
        if value:
            self._platform.add_secret(value)
        return value

    def url(self, name: str) -> str:
        """A required http(s) URL, without a trailing slash."""
        value = self.required_text(name)
        try:
            parsed = httpx.URL(value)
        except (httpx.InvalidURL, TypeError):
            raise self._platform.config_invalid(name, "is not a valid URL") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise self._platform.config_invalid(name, "must be an http:// or https:// URL")
        return value.rstrip("/")

    def choice(self, name: str, options: Iterable[str], default: str) -> str:
        value = self.text(name, default)
        allowed = list(options)
        if value not in allowed:
            raise self._platform.config_invalid(name, f"must be one of: {', '.join(allowed)}")
        return value

    def optional_url(self, name: str, default: str) -> str:
        """An http(s) URL without a trailing slash; ``default`` when missing or blank."""
        return self.url(name) if self.text(name).strip() else default

    def seconds(self, name: str, default: float) -> float:
        """A positive, finite number of seconds."""
        value = self._raw(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise self._platform.config_invalid(name, "must be a positive number of seconds")
        return float(value)

    def flag(self, name: str, default: bool) -> bool:
        value = self._raw(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._platform.config_invalid(name, "must be true or false")
        return value


# --- HTTP ------------------------------------------------------------------------------------------


def _timeout_config(seconds: float) -> httpx.Timeout:
    return httpx.Timeout(seconds, connect=min(seconds, 10.0))


@asynccontextmanager
async def streaming_request(
    platform: Platform,
    method: str,
    url: str,
    *,
    timeout: float,
    client: httpx.AsyncClient | None = None,
    **request: Any,
) -> AsyncIterator[httpx.Response]:
    """Send a request and yield its response unread, for streaming.

    ``timeout`` bounds the whole exchange, reading included: past it the block raises ``<x>.timeout``. A
    non-2xx answer raises ``platform.http_error`` with the platform's message; transport failures (also
    while the block reads) raise ``<x>.connection_error``. The response and a client created here are
    closed when the block exits for any reason, including the run being cancelled, so the platform sees
    the connection go. ``request`` holds httpx's request arguments (``json``, ``headers``, ``files``, ...).
    """
    own_client = client is None
    http = client if client is not None else httpx.AsyncClient(timeout=_timeout_config(timeout))
    try:
        async with asyncio.timeout(timeout):
            async with http.stream(method, url, **request) as response:
                if not response.is_success:
                    body = await read_limited(response, ERROR_BODY_MAX_BYTES)
                    raise platform.http_error(response.status_code, body, headers=response.headers)
                yield response
    except (TimeoutError, httpx.TimeoutException):
        raise platform.timeout(timeout) from None
    except httpx.TransportError as exc:
        raise platform.connection_error(exc) from None
    finally:
        if own_client:
            await http.aclose()


async def stop_request(
    platform: Platform, url: str, *, run_id: str, timeout: float = STOP_TIMEOUT, **request: Any
) -> None:
    """POST ``url`` to ask the platform to stop what this run started (its answer is not read): best effort,
    bounded by ``timeout``, never raising — a failure is logged. ``request`` holds httpx's request arguments."""
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            await client.post(url, **request)
    except httpx.HTTPError as exc:
        logger.warning("run %s: the %s stop call failed: %s", run_id, platform.label, type(exc).__name__)


async def read_limited(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of the response's body (what comes after is not read)."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= limit:
            return body[:limit]
    return body


@dataclass(frozen=True)
class SSEEvent:
    """One server-sent event; ``event`` is ``"message"`` when the server named none."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        """The data parsed as JSON (raises ``ValueError`` when it is not)."""
        return json.loads(self.data)


async def sse_events(response: httpx.Response) -> AsyncIterator[SSEEvent]:
    """The events of a ``text/event-stream`` response, framed by httpx-sse (the WHATWG rules: ``field: value``
    lines up to a blank line, several ``data`` lines joined with ``\\n``, ``:`` comments skipped, the last
    event id carried forward).

    Three leniencies the adapters rely on, kept on top of it: the response's ``Content-Type`` is not checked
    (platforms and proxies label their streams loosely, and a wrong label is no reason to fail a run); an event
    without data (``event: ping`` alone, a stray blank line after an ``id``) is not dispatched; and a last event
    not followed by its blank line is still dispatched when the stream ends.
    """
    source = httpx_sse.EventSource(
        httpx.Response(response.status_code, headers=_EVENT_STREAM_HEADERS, stream=_Terminated(response))
    )
    async for event in source.aiter_sse():
        if event.data:
            yield SSEEvent(event.event, event.data, event.id or None, event.retry)


# httpx-sse reads what it is handed only when it is labelled an event stream, decoded as UTF-8 (the only
# encoding the format allows).
_EVENT_STREAM_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}


class _Terminated(httpx.AsyncByteStream):
    """A response's (decoded) body followed by one blank line, so that the last event is dispatched even when
    the platform ends the stream without one; after a complete stream the extra line dispatches nothing."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.aiter_bytes():
            yield chunk
        yield b"\n\n"


async def json_values(response: httpx.Response, *, max_chars: int = 10 * 1024 * 1024) -> AsyncIterator[Any]:
    """The JSON values of a response holding one or more of them, newline-delimited or simply
    concatenated, each yielded as soon as it is complete. Raises ``ValueError`` when text that is not
    JSON remains at the end or the answer exceeds ``max_chars``."""
    decoder = json.JSONDecoder()
    buffer, seen = "", 0
    async for text in response.aiter_text():
        seen += len(text)
        if seen > max_chars:
            raise ValueError(f"the answer is longer than {max_chars} characters")
        buffer += text
        while buffer := buffer.lstrip():
            try:
                value, end = decoder.raw_decode(buffer)
            except json.JSONDecodeError:
                break  # incomplete: wait for more text
            buffer = buffer[end:]
            yield value
    if buffer.strip():
        raise ValueError(f"the answer ends with text that is not JSON: {buffer.strip()[:80]!r}")


async def json_answer(platform: Platform, response: httpx.Response, *, max_bytes: int = ANSWER_MAX_BYTES) -> Any:
    """A whole (not streamed) answer parsed as JSON. Raises ``<x>.protocol_error`` when it is larger than
    ``max_bytes`` (reading stops there) or is not JSON."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise platform.error("protocol_error", f"{platform.label}'s answer is larger than {max_bytes} bytes")
    try:
        return json.loads(bytes(body))
    except ValueError:
        raise platform.error("protocol_error", f"{platform.label}'s answer is not JSON") from None


def json_object(value: Any) -> dict[str, Any]:
    """``value`` as a JSON object: a mapping as is, JSON text (str or bytes) parsed, else (text that is not
    JSON, or JSON that is not an object) an empty dict."""
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, str | bytes):
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:  # UnicodeDecodeError is a ValueError
        return {}
    return parsed if isinstance(parsed, dict) else {}


def id_text(value: Any) -> str:
    """An id a platform sent as a string or a number, as text; "" for anything else (booleans included)."""
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) and str(value) else ""


# --- usage -----------------------------------------------------------------------------------------


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def usage_normalized(
    raw: Mapping[str, Any] | None,
    *,
    source: str,
    prompt_key: str = "prompt_tokens",
    completion_key: str = "completion_tokens",
    total_key: str = "total_tokens",
    extra_keys: Iterable[str] = (),
) -> dict[str, Any] | None:
    """A platform's usage as ``run.completed``'s ``usage``: ``prompt_tokens``, ``completion_tokens``,
    ``total_tokens`` (summed when the platform gives no total) and ``source`` (the platform), plus the
    ``extra_keys`` it reports as JSON scalars (e.g. ``total_price``, ``currency``). None when it reports
    no token count at all."""
    if not raw:
        return None
    prompt, completion, total = (_count(raw.get(k)) for k in (prompt_key, completion_key, total_key))
    if prompt is None and completion is None and total is None:
        return None
    usage: dict[str, Any] = {
        "prompt_tokens": prompt or 0,
        "completion_tokens": completion or 0,
        "total_tokens": total if total is not None else (prompt or 0) + (completion or 0),
        "source": source,
    }
    for key in extra_keys:
        value = raw.get(key)
        if isinstance(value, str | int | float | bool) and key not in usage:
            usage[key] = value
    return usage


# --- input -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputFile:
    """A file of the current input, held by the host as an artifact."""

    artifact_id: str
    name: str | None = None
    mime_type: str | None = None


def input_text(ctx: AgentRunContext) -> str:
    """The current input's text: ``input.text``, else its text content parts joined by newlines."""
    if ctx.input.text:
        return ctx.input.text
    return "\n".join(part.text for part in ctx.input.contents if part.type == "text" and part.text)


def text_only_input(ctx: AgentRunContext, platform: Platform, reason: str) -> str:
    """The input's text for a platform that takes text only: raises ``<x>.empty_input`` ("the input has no
    text; ``reason``") when there is none; files of the input are left out (and logged)."""
    text = input_text(ctx)
    if not text.strip():
        raise platform.error("empty_input", f"the input has no text; {reason}")
    if input_files(ctx):
        logger.info("run %s: input files are not sent to %s (%s)", ctx.run_id, platform.label, reason)
    return text


def input_files(ctx: AgentRunContext) -> list[InputFile]:
    """The artifacts of the current input (attachments, then content parts naming one), each once."""
    files: dict[str, InputFile] = {}
    for ref in ctx.input.attachments:
        files.setdefault(ref.artifact_id, InputFile(ref.artifact_id, ref.name, ref.mime_type))
    for part in ctx.input.contents:
        if part.artifact_id:
            files.setdefault(part.artifact_id, InputFile(part.artifact_id, part.file_name, part.mime_type))
    return list(files.values())


async def artifact_bytes(api: AgentRunAPIProxy, artifact_id: str, *, max_bytes: int) -> tuple[ArtifactMetadata, bytes]:
    """An artifact's metadata and content through ``api.artifacts``; raises ``ValueError`` when it is
    larger than ``max_bytes`` (checked before any byte is read) and ``AgentAPIException`` when the host
    refuses."""
    metadata = await api.artifacts.metadata(artifact_id)
    if metadata.size > max_bytes:
        raise ValueError(f"artifact {artifact_id} is {metadata.size} bytes; the limit is {max_bytes}")
    content = bytearray()
    async for chunk in api.artifacts.open_stream(artifact_id):
        content += chunk.data()
        if len(content) > max_bytes:
            raise ValueError(f"artifact {artifact_id} is larger than {max_bytes} bytes")
        if chunk.eof:
            break
    return metadata, bytes(content)


@dataclass(frozen=True)
class InputFileContent:
    """An input file read whole, named and typed for an upload."""

    name: str
    mime_type: str
    content: bytes


async def input_file_content(
    api: AgentRunAPIProxy, platform: Platform, file: InputFile, *, max_bytes: int, default_name: str = "file"
) -> InputFileContent:
    """The content of an input file, named by the input (else the artifact, else ``default_name``) and typed
    likewise (else ``application/octet-stream``). Raises ``<x>.input_unavailable`` when the host refuses
    the read or the file is larger than ``max_bytes``."""
    try:
        metadata, content = await artifact_bytes(api, file.artifact_id, max_bytes=max_bytes)
    except (AgentAPIException, ValueError) as exc:
        reason = exc.error.message if isinstance(exc, AgentAPIException) else str(exc)
        raise platform.error("input_unavailable", f"cannot read input file {file.artifact_id}: {reason}") from None
    return InputFileContent(
        name=file.name or metadata.name or default_name,
        mime_type=file.mime_type or metadata.mime_type or "application/octet-stream",
        content=content,
    )


# --- who and where ---------------------------------------------------------------------------------


def launcher_name(ctx: AgentRunContext) -> str | None:
    """The conversation's launcher as old LangBot named it to platforms (``person_123``), if it has one."""
    conversation = ctx.conversation
    if conversation is not None and conversation.launcher_type and conversation.launcher_id:
        return f"{conversation.launcher_type}_{conversation.launcher_id}"
    return None


def platform_user(ctx: AgentRunContext) -> str:
    """The user to name to a platform: the launcher (`launcher_name`), else the actor (``user_42``), else
    ``langbot_<conversation id>`` (the run id when there is no conversation)."""
    launcher = launcher_name(ctx)
    if launcher:
        return launcher
    if ctx.actor is not None and ctx.actor.actor_id:
        return f"{ctx.actor.actor_type}_{ctx.actor.actor_id}"
    return f"langbot_{ctx.context.conversation_id or ctx.run_id}"


async def stored_texts(
    api: AgentRunAPIProxy, keys: Iterable[str], *, scope: str = STATE_SCOPE
) -> dict[str, str] | None:
    """The non-empty strings stored under ``keys`` (a key holding nothing else is left out), or None when
    the host grants no state to this run — then nothing is continued from an earlier turn."""
    found: dict[str, str] = {}
    for key in keys:
        try:
            stored = await api.state.get(scope, key)
        except AgentAPIException as exc:
            logger.info("%s state unavailable (%s); nothing is continued from an earlier turn", scope, exc.error.code)
            return None
        if stored.found and isinstance(stored.value, str) and stored.value:
            found[key] = stored.value
    return found


async def stored_text(api: AgentRunAPIProxy, key: str, *, scope: str = STATE_SCOPE) -> str | None:
    """The non-empty string stored under ``key``; None when there is none or the host grants no state."""
    return (await stored_texts(api, [key], scope=scope) or {}).get(key)


class ConversationGoneError(Exception):
    """Raised by an adapter's turn when the platform no longer knows the conversation id kept in state."""


async def continued_or_restarted(
    turn: Callable[[str | None], AsyncIterator[AgentRunResult]], stored: str | None, *, ctx: AgentRunContext
) -> AsyncIterator[AgentRunResult]:
    """The results of ``turn(stored)``; when it raises `ConversationGoneError` (before any result, as a platform
    refuses the id up front) the turn is run once more as a new conversation, ``turn(None)``."""
    try:
        async for result in turn(stored):
            yield result
    except ConversationGoneError:
        logger.info("run %s: the platform forgot the stored conversation; starting a new one", ctx.run_id)
        async for result in turn(None):
            yield result
