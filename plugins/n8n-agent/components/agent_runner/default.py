"""The n8n-agent runner: one run is one call of an n8n workflow's webhook, its answer relayed as results.

The webhook gets the JSON body old LangBot sent (`chatInput`, `message`, `user_message_text`,
`conversation_id`, `session_id`, `user_id`, `msg_create_time`, plus `sessionId` for n8n's chat memory
nodes). The answer is either n8n's stream — newline-delimited JSON items `{"type": "begin"}`,
`{"type": "item", "content": "..."}` ..., `{"type": "end"}` — relayed as `message.delta`s, or a plain
answer: a JSON object whose `output-key` field is the reply (the whole object as JSON when it has no such
field; a one-item list is that item), or plain text. A streamed item whose content is a whole JSON object
(what "Respond to Webhook" sends when the webhook streams) is read the same way. n8n's Chat Trigger and AI
Agent name the reply `output`: with the default `output-key` (`response`) an answer without `response` but
with `output` replies `output`, and for a Chat Trigger URL (`.../chat`) `output` is looked for first.

A workflow that fails in a node fails the same way on a second try, so it is not retryable: an error item in
the stream names the node (`n8n.error`, `details.node`), and a plain 500 "Error in workflow" is `n8n.error`.

The conversation and session ids are the runner's own: made on a conversation's first turn and kept in
conversation state (`external.conversation_id`, `external.session_id`). Input files are not sent (old
LangBot sent the text only); an input without text fails as `n8n.empty_input`. Authentication: none, basic,
a JWT signed with HS256 (made with PyJWT, as old LangBot made it: `iat`, `exp` one hour later,
`sub: n8n-webhook`), or a custom header. Config field names are those of LangBot's `ai.n8n-service-api`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

from langbot_sdk.external import (
    CONVERSATION_ID_KEY,
    DEFAULT_TIMEOUT,
    SESSION_ID_KEY,
    STATE_SCOPE,
    ExternalAgentRunner,
    ExternalRunnerError,
    Platform,
    RunnerConfig,
    launcher_name,
    stored_texts,
    streaming_request,
    text_only_input,
    usage_normalized,
)
from langbot_sdk.protocol import AgentRunContext, AgentRunResult
from langbot_sdk.proxy import AgentRunAPIProxy

AUTH_TYPES = ("none", "basic", "jwt", "header")
DEFAULT_OUTPUT_KEY = "response"
CHAT_TRIGGER_OUTPUT_KEY = "output"  # what n8n's Chat Trigger and AI Agent nodes name the reply
# n8n's messages for a plain answer whose workflow failed or could not start: the same request fails again.
WORKFLOW_FAILURE_MESSAGES = ("error in workflow", "workflow could not be started")
JWT_LIFETIME = 3600
STREAM_TYPES = frozenset({"begin", "item", "end", "error"})
MAX_ANSWER_CHARS = 10 * 1024 * 1024


@dataclass(frozen=True)
class N8nSettings:
    webhook_url: str
    headers: dict[str, str]
    auth: tuple[str, str] | None
    timeout: float
    output_keys: tuple[str, ...]
    """The fields of a JSON answer that hold the reply; the first one present wins."""


def output_keys_for(webhook_url: str, configured: str) -> tuple[str, ...]:
    """A configured key other than the default is the only one read. The default, which LangBot wrote into
    every pipeline, also reads `output`, n8n's Chat Trigger convention — first for a Chat Trigger URL."""
    if configured != DEFAULT_OUTPUT_KEY:
        return (configured,)
    if urlsplit(webhook_url).path.rstrip("/").endswith("/chat"):
        return (CHAT_TRIGGER_OUTPUT_KEY, DEFAULT_OUTPUT_KEY)
    return (DEFAULT_OUTPUT_KEY, CHAT_TRIGGER_OUTPUT_KEY)


def read_settings(config: dict[str, Any], platform: Platform) -> N8nSettings:
    reader = RunnerConfig(config, platform)
    webhook_url = reader.url("webhook-url")
    auth_type = reader.choice("auth-type", AUTH_TYPES, "none")
    headers: dict[str, str] = {}
    auth: tuple[str, str] | None = None
    if auth_type == "basic":
        auth = (reader.required_text("basic-username"), reader.secret("basic-password", required=False))
    elif auth_type == "jwt":
        secret = reader.secret("jwt-secret")
        if reader.text("jwt-algorithm", "HS256").strip().upper() != "HS256":
            raise platform.config_invalid("jwt-algorithm", "must be HS256 (the only algorithm supported)")
        headers["Authorization"] = f"Bearer {jwt_hs256(secret)}"
    elif auth_type == "header":
        name = reader.required_text("header-name")
        headers[name] = reader.secret("header-value")
    return N8nSettings(
        webhook_url=webhook_url,
        headers=headers,
        auth=auth,
        timeout=reader.seconds("timeout", DEFAULT_TIMEOUT),
        output_keys=output_keys_for(
            webhook_url, reader.text("output-key", DEFAULT_OUTPUT_KEY).strip() or DEFAULT_OUTPUT_KEY
        ),
    )


def jwt_hs256(secret: str, *, now: float | None = None) -> str:
    """A JWT with the claims old LangBot sent, signed with HMAC-SHA256."""
    issued = int(time.time() if now is None else now)
    claims = {"exp": issued + JWT_LIFETIME, "iat": issued, "sub": "n8n-webhook"}
    return jwt.encode(claims, secret, algorithm="HS256")


class N8nAgentRunner(ExternalAgentRunner):
    platform_name = "n8n"
    platform_label = "n8n"

    async def turn(self, ctx: AgentRunContext, platform: Platform) -> AsyncIterator[AgentRunResult]:
        settings = read_settings(ctx.config, platform)
        # Old LangBot sent n8n the message's text only; a message without text is refused, not sent empty.
        text = text_only_input(ctx, platform, "n8n webhooks are sent the message's text only")
        ids, new_ids = await _session_ids(ctx, self.run_api(ctx))
        for key, value in new_ids.items():
            yield AgentRunResult.state_updated(ctx.run_id, STATE_SCOPE, key, value)
        async for result in self._call(ctx, settings, platform, ids, text):
            yield result

    async def _call(
        self, ctx: AgentRunContext, settings: N8nSettings, platform: Platform, ids: dict[str, str], text: str
    ) -> AsyncIterator[AgentRunResult]:
        # Old LangBot sent the launcher, else the bare actor id (not `platform_user`'s `user_42`).
        user_id = launcher_name(ctx) or (ctx.actor.actor_id if ctx.actor is not None and ctx.actor.actor_id else "")
        body = {
            "chatInput": text,
            "message": text,
            "user_message_text": text,
            "conversation_id": ids[CONVERSATION_ID_KEY],
            "session_id": ids[SESSION_ID_KEY],
            "sessionId": ids[SESSION_ID_KEY],
            "user_id": user_id,
            "msg_create_time": ctx.event.event_time or int(time.time()),
        }
        options: dict[str, Any] = {"headers": settings.headers, "json": body}
        if settings.auth is not None:
            options["auth"] = httpx.BasicAuth(*settings.auth)
        try:
            async for result in self._answer(ctx, settings, platform, options):
                yield result
        except ExternalRunnerError as exc:
            raise _workflow_failure(platform, exc) or exc from None

    async def _answer(
        self, ctx: AgentRunContext, settings: N8nSettings, platform: Platform, options: dict[str, Any]
    ) -> AsyncIterator[AgentRunResult]:
        decoder = json.JSONDecoder()
        raw, buffer, streamed, parts = "", "", False, []
        plain: list[Any] = []
        async with streaming_request(
            platform, "POST", settings.webhook_url, timeout=settings.timeout, **options
        ) as response:
            async for chunk in response.aiter_text():
                raw += chunk
                if len(raw) > MAX_ANSWER_CHARS:
                    raise platform.error(
                        "answer_too_large", f"the webhook answered more than {MAX_ANSWER_CHARS} characters"
                    )
                buffer += chunk
                while buffer := buffer.lstrip():
                    try:
                        value, end = decoder.raw_decode(buffer)
                    except json.JSONDecodeError:
                        break
                    buffer = buffer[end:]
                    if isinstance(value, dict) and value.get("type") in STREAM_TYPES:
                        streamed = True
                        piece = self._stream_item(settings, platform, value)
                        if piece:
                            parts.append(piece)
                            yield AgentRunResult.message_delta(ctx.run_id, piece)
                    else:
                        plain.append(value)
        usage = None
        if streamed:
            reply = "".join(parts)
        else:
            reply, usage = self._plain_reply(settings, raw, plain)
        if not reply.strip():
            raise platform.empty_output("streamed items had no content" if streamed else "")
        yield AgentRunResult.message_completed(ctx.run_id, reply)
        yield AgentRunResult.run_completed(ctx.run_id, usage=usage, metadata={"streamed": streamed})

    def _stream_item(self, settings: N8nSettings, platform: Platform, item: dict[str, Any]) -> str:
        if item.get("type") == "error":
            raise _stream_failure(platform, item)
        if item.get("type") != "item":
            return ""
        content = item.get("content")
        if content is None:
            return ""
        keyed = _output_field(settings, _whole_object(content))
        if keyed is not None:
            return keyed
        return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)

    def _plain_reply(self, settings: N8nSettings, raw: str, values: list[Any]) -> tuple[str, dict[str, Any] | None]:
        if len(values) != 1:
            return raw.strip(), None  # not JSON (or several values): the text as it came
        value = values[0]
        if isinstance(value, list) and len(value) == 1:
            value = value[0]  # n8n's "all incoming items" answer for one item
        if not isinstance(value, dict):
            return (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)), None
        usage_raw = value.get("usage")
        usage = usage_normalized(usage_raw, source="n8n") if isinstance(usage_raw, dict) else None
        keyed = _output_field(settings, value)
        return (keyed if keyed is not None else json.dumps(value, ensure_ascii=False)), usage


def _whole_object(content: Any) -> dict[str, Any] | None:
    """A stream item's content when it is one whole JSON object — given as such or as its JSON text, as
    "Respond to Webhook" streams an item — else None (a token of generated text)."""
    if isinstance(content, dict):
        return content
    if not isinstance(content, str) or not content.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _output_field(settings: N8nSettings, value: dict[str, Any] | None) -> str | None:
    """The reply in a JSON object: its first output key present, as text (non-strings as JSON); else None."""
    if value is None:
        return None
    for key in settings.output_keys:
        if key in value:
            output = value[key]
            return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return None


def _stream_failure(platform: Platform, item: dict[str, Any]) -> ExternalRunnerError:
    """An error item: n8n sends `content: null` and names the failed node in `metadata.nodeName`."""
    metadata = item.get("metadata")
    node = metadata.get("nodeName") if isinstance(metadata, dict) else None
    content = item.get("content") or item.get("message")
    detail = content if isinstance(content, str) else (json.dumps(content) if content else "")
    if isinstance(node, str) and node:
        message = f"node {node!r} failed" + (f": {detail}" if detail else "")
        return platform.stream_error(message, node=node)
    return platform.stream_error(detail or "the workflow failed")


def _workflow_failure(platform: Platform, exc: ExternalRunnerError) -> ExternalRunnerError | None:
    """n8n's 500 for a workflow that failed (or could not start) as the deterministic failure it is:
    `n8n.error`, not retryable, with n8n's message. None for any other failure."""
    if exc.code != f"{platform.name}.unavailable" or exc.details.get("status") != 500:
        return None
    if not any(marker in exc.message.lower() for marker in WORKFLOW_FAILURE_MESSAGES):
        return None
    message = exc.message.split(": ", 1)[-1]
    return platform.stream_error(f"{message} (see the workflow's execution in n8n)", status=500)


async def _session_ids(ctx: AgentRunContext, api: AgentRunAPIProxy) -> tuple[dict[str, str], dict[str, str]]:
    """The conversation's ids, and those made now (to store). Without state every turn gets new ids."""
    stored = await stored_texts(api, (CONVERSATION_ID_KEY, SESSION_ID_KEY))
    ids = stored or {}
    made: dict[str, str] = {}
    if CONVERSATION_ID_KEY not in ids:
        made[CONVERSATION_ID_KEY] = str(uuid.uuid4())
    if SESSION_ID_KEY not in ids:
        # Old LangBot's session id was the launcher; a conversation of its own gets one when there is none.
        made[SESSION_ID_KEY] = launcher_name(ctx) or f"session-{uuid.uuid4()}"
    return {**ids, **made}, (made if stored is not None else {})
