"""The chat-platform adapter interface: what one platform implements so the host can take its updates in
and deliver run results back. Everything platform-specific lives behind it; everything the host decides
(deduplication, the gateway, streaming cadence, splitting, retries, recording failures) lives outside it
in `platforms.inbound` and `platforms.delivery`.

Implementing a platform (see `platforms/adapters/telegram.py` for a complete one):

1. Subclass `PlatformAdapter` in `platforms/adapters/<platform>.py`; set `platform` (the `Bot.platform`
   value), `capabilities` (a `PlatformCapabilities`: what the platform can do and its limits — this is what
   a runner sees as `ctx.delivery.supports_edit` / `supports_reaction` / `max_message_size`) and
   `credential_keys` (the platform's own names; `api_base_url` is always accepted too). An adapter that
   sets `credential_schema` (`CredentialField`s: name, required, secret, where the platform issues it)
   has a bot's credentials checked against it when the bot is saved, over REST and in the admin
   (`credentials_problems`), and the admin's bot form shows it.
2. Instances are made from the bot's decrypted credentials: `Adapter(bot_id=..., credentials=...)`. The
   webhook view, the file-fetching task and platform actions make short-lived ones (then `aclose()`); the
   reply delivery keeps one per bot on the worker's loop until the bot's credentials change and shares it
   between replies written at once, so outbound coroutines must be safe to run concurrently. Override
   `text_length` when the platform counts its limit otherwise than in characters (Telegram: UTF-16 units)
   and `write_interval_seconds(target)` when its pace depends on the chat (Telegram groups).
3. Inbound webhook (`POST /platforms/<platform>/<workspace slug>/<bot_id>/webhook`): `verify(request)`
   raises `InboundRefusedError` for a forged or stale request (the host records it and answers the error's
   status); `parse(request)` turns the body into an `InboundBatch` of `InboundUpdate`s, each a gateway
   envelope (`EventEnvelopeIn` fields as a dict; `source: "platform"`, `event_id` derived from the platform's
   own delivery id so a redelivered update is handled once) plus the files the message carries as
   `PlatformFileRef`s. The host fetches those files through `fetch_file` off the webhook's request (only
   then, and only when the update is new) and gives the runner artifact refs. `InboundBatch.response`
   answers platform handshakes (Slack's URL verification, Lark's challenge).
4. Replies: a `ReplyTarget` says where a run's answer goes (chat, thread, the message replied to); the
   adapter puts `ReplyTarget.as_data()` into the envelope's `data.reply_target`, and the delivery reads it
   back from the run's event. Outbound calls raise `PlatformAPIError` (with `retry_after` when the platform
   says how long to wait, `retryable` for transient failures, `outcome_unknown` when the call may have
   been carried out without an answer saying so — `transport_failure` classifies a transport error); the
   host retries what is safe to repeat and, when it gives up, records the failure on the run.
5. Long-lived connections (Discord gateway, ...): set `connector_class` to a `PlatformConnector` subclass;
   its `run()` keeps the connection, reconnects with `backoff_delays()`, and hands each update to the
   `on_update` callback (`platforms.inbound.platform_update_accept` behind it).
6. Register the class: add its dotted path to `ADAPTER_PATHS` in `platforms/registry.py`.

Tests drive an adapter against a local fake of the platform's API (credentials' `api_base_url` pointing at
it; `tests/fakes/telegram_server.py` on `tests/fakes/platform_http.py`) and post real-shaped updates to the
webhook URL (`tests/platforms/conftest.py`); the delivery policy is driven by handing a run's results to a
`PlatformDeliveryPort` as the worker does (`tests/platforms/test_delivery_policy.py`), end to end with a real
worker and the qa-runner in `tests/platforms/test_telegram_e2e.py`.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import json
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiohttp
import httpx
import jsonschema
import websockets
from django.conf import settings

from foundation.limits import json_too_deep
from foundation.outbound import AddressRefusedError, host_private_allowed, url_refusal

logger = logging.getLogger(__name__)

PLATFORM_ACTIONS = ("message.send", "message.edit", "reaction.add")

# The event types an adapter may put in an envelope besides `message.received` (docs/platform-events.md):
# the same names and the same envelope shape on every platform, so a binding written for one works on all.
PLATFORM_EVENT_TYPES = (
    "member.joined",
    "member.left",
    "reaction.added",
    "reaction.removed",
    "message.recalled",
    "message.edited",
    "card.clicked",
    "bot.added",
)


@dataclass(frozen=True)
class PlatformCapabilities:
    """What a platform can do and the limits the host's delivery keeps to."""

    edit: bool = False
    """Sent messages can be edited (streaming by edits, `message.edit`)."""
    reaction: bool = False
    files_in: bool = False
    files_out: bool = False
    threads: bool = False
    max_message_chars: int = 4000
    """The platform's own limit on one message's text; longer replies are split."""
    edit_interval_seconds: float = 1.0
    """The least time between two writes (send or edit) to one chat while streaming."""
    max_file_bytes: int | None = None
    event_types: tuple[str, ...] = ()
    """The events beyond `message.received` this adapter delivers (a subset of `PLATFORM_EVENT_TYPES`);
    the README's platform matrix is generated from it."""
    groups: bool = True
    """The bot takes messages in group chats (False: one-to-one only, e.g. an Official Account)."""

    @property
    def actions(self) -> tuple[str, ...]:
        """The platform actions (docs/platform-actions.md) this platform can carry out."""
        return tuple(
            a
            for a in PLATFORM_ACTIONS
            if a == "message.send" or (a == "message.edit" and self.edit) or (a == "reaction.add" and self.reaction)
        )


@dataclass(frozen=True)
class CredentialField:
    """One credential of a platform's bots, as the admin's bot form shows it and a save checks it."""

    name: str
    required: bool = False
    secret: bool = False
    """Shown masked (every stored credential is masked anyway; this says which ones matter)."""
    help: str = ""
    """What it is and where the platform issues it."""
    types: tuple[str, ...] = ("string",)
    """JSON Schema types the value may have (an id some consoles show as a number: `("string", "integer")`)."""
    link: str = ""
    """The page where the platform issues it (the bot form links there)."""
    pattern: str = ""
    """A regular expression a string value must match (checked on save), e.g. Telegram's token shape."""
    pattern_hint: str = ""
    """What the pattern asks for, in words, for the message when a value does not match."""


FLAG_PATTERN = r"^(?i:true|false|yes|no|on|off|1|0)?$"
"""What a yes/no credential may be as text (the admin's bot form saves text; REST may send a boolean)."""


def credential_flag(value: Any) -> bool:
    """A yes/no credential (`types=("boolean", "string")`, `pattern=FLAG_PATTERN`) as a bool; off unless
    it says yes."""
    if isinstance(value, bool):
        return value
    return str(value or "").strip().lower() in ("true", "yes", "on", "1")


@dataclass(frozen=True)
class InboundRequest:
    """An inbound webhook call as the adapter sees it: header names lower-cased, the raw body bytes."""

    headers: Mapping[str, str]
    body: bytes
    query: Mapping[str, str] = field(default_factory=dict)
    remote_addr: str = ""
    method: str = "POST"
    """`GET` only for adapters with `accepts_get` (a platform's URL check, WeCom's `echostr`)."""

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


class InboundRefusedError(Exception):
    """The request is refused: `reason` is `forged` (bad secret, token or signature), `replayed` (stale
    timestamp), or `malformed` (not the platform's shape). The host records forged and replayed ones."""

    def __init__(self, reason: str, message: str, *, status: int = 403) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


def inbound_json_object(raw: bytes | str, *, what: str) -> dict[str, Any]:
    """The JSON object an inbound body (or a JSON string inside one) holds, or `InboundRefusedError`
    ("malformed", 400) saying it is not `what`: not JSON, not an object, or nested deeper than
    `LANGBOT_API_JSON_MAX_DEPTH`. Every adapter reads platform JSON through here: `json.loads` of a deep
    body would end in a RecursionError (a 500 with a traceback), and a list where an object belongs in an
    AttributeError; the depth is found by scanning the text before anything is parsed."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    max_depth = int(settings.LANGBOT_API_JSON_MAX_DEPTH)
    if json_too_deep(data, max_depth) is not None:
        raise InboundRefusedError("malformed", f"{what}: nested more than {max_depth} levels deep", status=400)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError only if the scan and the parser disagreed
        raise InboundRefusedError("malformed", f"{what}: not JSON", status=400) from None
    if not isinstance(value, dict):
        raise InboundRefusedError("malformed", f"{what}: not a JSON object", status=400)
    return value


# What reading a field of the wrong type raises somewhere in an adapter's or an SDK's code: a string where
# a list belongs, a list where an object does, a number too large for a float or a date.
_WRONG_SHAPE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError)


@contextmanager
def malformed_unless_shaped(what: str) -> Iterator[None]:
    """Read a verified body inside this: a field of the wrong type answers 400 ("malformed") instead of a
    500. The platforms' SDKs build their objects without checking types, so such a field fails wherever it
    is first used, and the update is junk whichever place that is."""
    try:
        yield
    except _WRONG_SHAPE_ERRORS as exc:
        raise InboundRefusedError("malformed", f"{what}: {type(exc).__name__}", status=400) from None


@dataclass(frozen=True)
class PlatformFileRef:
    """A file on the platform, fetched only when the host stores it (`PlatformAdapter.fetch_file`)."""

    ref: dict[str, Any]
    """The platform's own handle, JSON-serialisable (e.g. `{"file_id": ...}` on Telegram)."""
    name: str = ""
    mime_type: str = ""
    size: int | None = None
    kind: str = "file"
    """`image`, `file`, `audio`, `video`: how the message carried it."""


@dataclass(frozen=True)
class FetchedFile:
    data: bytes
    name: str = ""
    mime_type: str = ""


@dataclass
class InboundUpdate:
    """One update the gateway should see: `envelope` has `EventEnvelopeIn`'s fields (`bot_id` and
    `source` are set by the host); `files` are added to `envelope.input.attachments` once fetched."""

    envelope: dict[str, Any]
    files: list[PlatformFileRef] = field(default_factory=list)


@dataclass
class InboundBatch:
    """What one webhook call carried, and what to answer the platform (`{"ok": true}` when `response` is
    None)."""

    updates: list[InboundUpdate] = field(default_factory=list)
    response: dict[str, Any] | None = None
    text_response: str | None = None
    """Answered as `text/plain` instead of JSON (WeCom wants its decrypted `echostr`, or an empty body)."""
    reply_wait: Callable[[bool], tuple[str, str]] | None = None
    """Called by the webhook once the updates are accepted (told whether one of them may have started a
    run), instead of answering at once; returns the answer's body and content type. An Official Account
    waits here, within WeChat's window, for the run's reply to answer it passively."""


@dataclass(frozen=True)
class ReplyTarget:
    """Where a reply goes. Stored in the event as `data.reply_target`; events from elsewhere (the REST API,
    schedules) that name a bot may give `data.reply_target` or just `data.chat_id`."""

    chat_id: str
    thread_id: str | None = None
    reply_to_message_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"chat_id": self.chat_id}
        if self.thread_id:
            data["thread_id"] = self.thread_id
        if self.reply_to_message_id:
            data["reply_to_message_id"] = self.reply_to_message_id
        if self.extra:
            data["extra"] = self.extra
        return data

    @classmethod
    def from_event_data(cls, data: Mapping[str, Any] | None) -> ReplyTarget | None:
        data = data or {}
        target = data.get("reply_target")
        if isinstance(target, dict) and target.get("chat_id") not in (None, ""):
            extra = target.get("extra")
            return cls(
                chat_id=str(target["chat_id"]),
                thread_id=str(target["thread_id"]) if target.get("thread_id") else None,
                reply_to_message_id=str(target["reply_to_message_id"]) if target.get("reply_to_message_id") else None,
                extra=extra if isinstance(extra, dict) else {},
            )
        chat = data.get("chat_id")
        if isinstance(chat, str | int) and not isinstance(chat, bool) and str(chat):
            return cls(chat_id=str(chat))
        return None


_EVENT_SUBJECTS = {
    "member.joined": "member",
    "member.left": "member",
    "bot.added": "chat",
    "reaction.added": "message",
    "reaction.removed": "message",
    "message.recalled": "message",
    "message.edited": "message",
    "card.clicked": "message",
}


def platform_event_envelope(
    *,
    event_id: str,
    event_type: str,
    source_event_type: str,
    chat_id: str | None,
    chat_type: str | None,
    actor_id: str | None = None,
    actor_name: str | None = None,
    actor_type: str = "user",
    target_message_id: str | None = None,
    reaction: str | None = None,
    action: Any = None,
    text: str | None = None,
    thread_id: str | None = None,
    reply_target: ReplyTarget | None = None,
    extra: Mapping[str, Any] | None = None,
    raw: Any = None,
    event_time: float | None = None,
) -> dict[str, Any]:
    """The envelope of an event beyond `message.received` (one of `PLATFORM_EVENT_TYPES`), the same shape
    on every platform (docs/platform-events.md): who did it in `actor` (the member who joined or left, the
    user who reacted, clicked, edited or recalled, who added the bot), the chat in `data.chat_id` /
    `data.chat_type`, the message concerned in `data.target_message_id`, the emoji in `data.reaction`,
    the card's action value in `data.action`, an edit's new text in `input.text`. A reply goes to the chat
    the event happened in (`data.reply_target`, never a reply to the message concerned unless given)."""
    if reply_target is None and not chat_id:
        raise ValueError("an event needs its chat or a reply target")
    target = reply_target or ReplyTarget(chat_id=str(chat_id), thread_id=thread_id)
    # An id made of what the event says (an emoji, a timestamp's "+") in the characters event ids allow.
    event_id = re.sub(r"[^A-Za-z0-9._:@-]", lambda m: f"@{ord(m.group()):x}", event_id)
    if len(event_id) > 200:
        event_id = f"{event_id[:130]}:{hashlib.sha256(event_id.encode()).hexdigest()}"
    subject_type = _EVENT_SUBJECTS.get(event_type, "chat")
    subject_id = {"member": actor_id, "chat": chat_id}.get(subject_type, target_message_id)
    data: dict[str, Any] = {
        **({"chat_id": chat_id} if chat_id else {}),
        **({"chat_type": chat_type} if chat_type else {}),
        "reply_target": target.as_data(),
        **({"target_message_id": target_message_id} if target_message_id else {}),
        **({"reaction": reaction} if reaction else {}),
        **({"action": action} if action is not None else {}),
        **(dict(extra) if extra else {}),
    }
    if raw is not None:
        data["raw"] = raw
    envelope: dict[str, Any] = {
        "event_id": event_id,
        "event_type": event_type,
        "source_event_type": source_event_type[:100],
        "subject": {"subject_type": subject_type, **({"subject_id": str(subject_id)[:255]} if subject_id else {})},
        "input": {"text": text} if text else {},
        "data": data,
    }
    if thread_id:
        envelope["thread_id"] = thread_id
    if actor_id or actor_name:
        envelope["actor"] = {
            "actor_type": actor_type,
            **({"actor_id": str(actor_id)[:255]} if actor_id else {}),
            **({"actor_name": str(actor_name)[:255]} if actor_name else {}),
        }
    if event_time is not None:
        envelope["event_time"] = event_time
    return envelope


@dataclass(frozen=True)
class SentMessage:
    """A message the bot sent, as the platform names it (enough to edit or react to it later)."""

    chat_id: str
    message_id: str


@dataclass(frozen=True)
class OutboundFile:
    data: bytes
    name: str
    mime_type: str
    caption: str = ""


class PlatformAPIError(Exception):
    """A platform call failed. `retry_after` (seconds) when the platform said how long to wait (HTTP 429),
    `retryable` for other transient failures (5xx, network); anything else is final.

    `outcome_unknown` when the call may have been carried out although no answer says so: the connection
    broke or timed out after the request was written, the platform answered an error that does not say
    the call was not executed (a 5xx, Slack's `internal_error`), or a OneBot call got no response after
    its frame left. Adapters only classify; `platforms.delivery` decides, with one rule for every
    platform, that such a write (a send, an upload, a reaction) is never made again, while an idempotent
    call (an edit to a given text, a file download) may be. A failure that provably happened before the
    request left (`request_never_sent`) is not `outcome_unknown`."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        retryable: bool = False,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.retryable = retryable or retry_after is not None
        self.outcome_unknown = outcome_unknown


# Transport failures that happen before a request's first byte is written: no connection was made (DNS,
# refused, connect or TLS handshake timed out) or none was free in the pool. Anything else (a read or
# write timeout, a reset or a close after the request was written) leaves the outcome unknown.
_NEVER_SENT: tuple[type[BaseException], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
    AddressRefusedError,
    socket.gaierror,
    ConnectionRefusedError,
)


def request_never_sent(exc: BaseException) -> bool:
    """Whether a transport failure (or one of its causes: SDKs wrap the HTTP client's errors in their
    own) provably happened before the request left, so repeating the request cannot do its work twice."""
    # Only explicit causes (`raise ... from`): an implicit context may be an older, unrelated failure.
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, _NEVER_SENT):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


def transport_failure(message: str, exc: BaseException) -> PlatformAPIError:
    """The retryable `PlatformAPIError` for a call that failed on the way (no answer from the platform):
    its outcome is unknown unless `request_never_sent` proves otherwise."""
    return PlatformAPIError(message, retryable=True, outcome_unknown=not request_never_sent(exc))


class PlatformAdapter(abc.ABC):
    """One platform. Subclasses set the class attributes and implement the abstract methods."""

    platform: ClassVar[str]
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities()
    credential_keys: ClassVar[tuple[str, ...]] = ()
    credential_schema: ClassVar[tuple[CredentialField, ...]] = ()
    """Empty: the bot's credentials are not checked on save (adapters written before the schema)."""
    connector_class: ClassVar[type[PlatformConnector] | None] = None
    accepts_get: ClassVar[bool] = False
    """The webhook route takes GET requests too (else it answers them 405)."""
    connection_kinds: ClassVar[tuple[str, ...]] = ()
    """How updates reach the host, in words for the README's platform matrix (`platforms.matrix`), e.g.
    `("gateway WebSocket",)`; empty: "webhook", and "long connection" too when `connector_class` is set."""

    def __init__(self, *, bot_id: str, credentials: Mapping[str, Any], allow_private: bool | None = None) -> None:
        self.bot_id = bot_id
        self.credentials = dict(credentials)
        # Whether the bot's outbound connections may reach private addresses (the outbound address guard,
        # foundation.outbound): its workspace's flag or the host's switch (the default here).
        self.allow_private = host_private_allowed() if allow_private is None else allow_private

    @classmethod
    def capabilities_for(cls, credentials: Mapping[str, Any]) -> PlatformCapabilities:
        """What a bot with these credentials can do: `capabilities`, unless one of its credentials changes
        that (a DingTalk bot with an AI card template edits its replies). Instances carry theirs as
        `capabilities`; runners are told these (`ctx.delivery`) for the bot their event came through."""
        return cls.capabilities

    @classmethod
    def credentials_json_schema(cls) -> dict[str, Any] | None:
        """`credential_schema` as a JSON Schema (None when the adapter declares none): the declared keys
        and `api_base_url` only, the required ones present and not empty."""
        if not cls.credential_schema:
            return None
        properties: dict[str, Any] = {"api_base_url": {"type": "string"}}
        for item in cls.credential_schema:
            allowed: dict[str, Any] = {"type": list(item.types) if len(item.types) > 1 else item.types[0]}
            if item.required:
                allowed["minLength"] = 1
            if item.pattern:
                allowed["pattern"] = item.pattern
            properties[item.name] = allowed
        return {
            "type": "object",
            "properties": properties,
            "required": [item.name for item in cls.credential_schema if item.required],
            "additionalProperties": False,
        }

    @classmethod
    def credentials_problems(cls, credentials: Mapping[str, Any]) -> dict[str, str]:
        """What is wrong with a bot's credentials against `credential_schema`, as `{"credentials.<key>":
        message}` (empty when nothing is, or when the adapter declares no schema)."""
        schema = cls.credentials_json_schema()
        if schema is None:
            return {}
        problems: dict[str, str] = {}
        for error in jsonschema.Draft202012Validator(schema).iter_errors(dict(credentials)):
            if error.validator == "required":
                for name in schema["required"]:
                    if name not in credentials:
                        problems.setdefault(f"credentials.{name}", f"Required for a {cls.platform} bot.")
            elif error.validator == "additionalProperties":
                known = ", ".join(sorted(schema["properties"]))
                for name in credentials:
                    if name not in schema["properties"]:
                        problems.setdefault(f"credentials.{name}", f"Not a {cls.platform} credential (known: {known}).")
            else:
                name = str(error.absolute_path[0]) if error.absolute_path else ""
                expected = schema["properties"].get(name, {}).get("type")
                kinds = " or ".join(expected) if isinstance(expected, list) else expected
                if error.validator == "minLength":
                    message = "May not be empty."
                elif error.validator == "pattern":
                    field = next((item for item in cls.credential_schema if item.name == name), None)
                    message = f"Does not look like {field.pattern_hint if field else 'the expected value'}."
                else:
                    message = f"Must be a {kinds}."
                problems.setdefault(f"credentials.{name}", message)
        return problems

    @staticmethod
    def text_length(text: str) -> int:
        """The length the platform's `max_message_chars` counts (Telegram counts UTF-16 code units)."""
        return len(text)

    def write_interval_seconds(self, target: ReplyTarget) -> float:
        """The least time between two writes to this chat while a reply streams (platforms that allow
        less in groups than in private chats say so here)."""
        return self.capabilities.edit_interval_seconds

    def plain_reply_target(self, target: ReplyTarget, message_id: str | None) -> ReplyTarget:
        """Where a group reply goes when it is not to quote the message `message_id` it answers (the
        binding's `group_reply: plain` or `mention`, platforms.delivery): by default the same chat and
        thread, replying to no message."""
        return ReplyTarget(chat_id=target.chat_id, thread_id=target.thread_id, extra=target.extra)

    def mention_markup(self, actor: dict[str, Any]) -> str | None:
        """The text that @-mentions `actor` (an event's sender) on this platform, put before a group reply
        when the binding asks for `group_reply: mention`; None when there is none for this platform or
        sender (the reply then quotes the message instead)."""
        return None

    @property
    def api_base_url(self) -> str | None:
        value = self.credentials.get("api_base_url")
        return str(value).rstrip("/") if value else None

    async def api_base_url_check(self) -> None:
        """For a platform SDK that takes no HTTP transport (so no connection of its own can be checked):
        before a call, refuse (a final `PlatformAPIError`) when `api_base_url`'s host resolves to an
        address the outbound guard refuses. The SDK resolves the name again for its connection, so a name
        that changes its answer in between is not caught here; SDKs that take a transport are guarded at
        every connection instead."""
        url = self.api_base_url
        if url is None or self.allow_private:
            return
        refusal = await asyncio.to_thread(url_refusal, url, allow_private=False)
        if refusal is not None:
            raise PlatformAPIError(f"api_base_url refused: {refusal}")

    # -- inbound --------------------------------------------------------------------------------
    @abc.abstractmethod
    def verify(self, request: InboundRequest) -> None:
        """Raise `InboundRefusedError` unless the request provably comes from the platform."""

    @abc.abstractmethod
    def parse(self, request: InboundRequest) -> InboundBatch:
        """The updates of a verified request (raise `InboundRefusedError("malformed", ...)` for junk)."""

    async def fetch_file(self, ref: PlatformFileRef) -> FetchedFile:
        raise PlatformAPIError(f"{self.platform} files cannot be fetched")

    # -- outbound -------------------------------------------------------------------------------
    @abc.abstractmethod
    async def send_text(self, target: ReplyTarget, text: str) -> SentMessage: ...

    async def edit_text(self, message: SentMessage, text: str) -> None:
        raise PlatformAPIError(f"{self.platform} messages cannot be edited")

    async def send_file(self, target: ReplyTarget, file: OutboundFile) -> SentMessage:
        raise PlatformAPIError(f"{self.platform} does not take files from bots")

    async def add_reaction(self, message: SentMessage, reaction: str) -> None:
        raise PlatformAPIError(f"{self.platform} has no reactions")

    async def reply_finished(self, target: ReplyTarget, sent: list[SentMessage], *, failed: bool) -> None:  # noqa: B027
        """The delivery has written a run's whole reply (or given up: `failed`). Platforms whose streamed
        reply stays open until told (DingTalk's AI cards, a WeCom AI bot's stream) close it here; the
        others have nothing to do."""

    async def webhook_register(self, url: str) -> str:
        """Tell the platform where to send updates (an admin action); returns a line for the operator."""
        raise PlatformAPIError(
            f"{self.platform} webhooks are configured on the platform's own console: paste {url} there"
        )

    async def identity(self) -> str:
        """Call the platform's identity endpoint with the bot's credentials (the admin's "Test
        connection"): a line naming the bot as the platform knows it; `PlatformAPIError` when refused."""
        raise PlatformAPIError(f"{self.platform} has no identity call")

    async def aclose(self) -> None:  # noqa: B027 - most adapters hold nothing to release
        """Release clients opened by outbound calls."""


UpdateHandler = Callable[[InboundUpdate], Awaitable[None]]


class ConnectionClosedError(Exception):
    """A connector's connection ended, for the reason its message gives (shown on the bot's page). `fatal`
    when connecting again soon cannot help (credentials refused, a privileged intent not granted): the
    connector then waits its `fatal_retry_delay` instead of the backoff."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class PlatformConnector(abc.ABC):
    """A long-lived connection of one bot to its platform (started by the connector process). `state` is
    what `/healthz` and the bot's admin page show: `connecting`, `connected`, `backoff`, `error`, `stopped`.

    A connector that holds one connection at a time implements `run` as `await self.hold(self._session)`:
    `hold` opens it again whenever it ends, after the backoff (restarted once a connection was up)."""

    reconnect_first_delay: ClassVar[float] = 1.0
    # Credentials the platform refuses cannot heal by retrying fast: retried at this pace instead.
    fatal_retry_delay: ClassVar[float] = 300.0
    closed_detail: ClassVar[str] = "the platform closed the connection"

    def __init__(self, *, adapter: PlatformAdapter, on_update: UpdateHandler) -> None:
        self.adapter = adapter
        self.on_update = on_update
        self.state = "stopped"
        self.detail = ""

    @abc.abstractmethod
    async def run(self) -> None:
        """Hold the connection until cancelled, reconnecting with `backoff_delays()` between attempts."""

    @staticmethod
    def backoff_delays(first: float = 1.0, cap: float = 60.0) -> Iterator[float]:
        delay = first
        while True:
            yield delay
            delay = min(cap, delay * 2)

    async def sleep_backoff(self, delay: float, detail: str) -> None:
        self.state, self.detail = "backoff", detail
        await asyncio.sleep(delay)

    async def hold(self, session: Callable[[], Awaitable[None]]) -> None:
        """Run `session` (one connection, until it ends) again and again until cancelled. A transport
        failure or a `ConnectionClosedError` is shown as the state's detail and followed by the backoff; a
        fatal one by `fatal_retry_delay`. The adapter's clients are closed when the connector stops."""
        name = f"{self.adapter.platform} bot {self.adapter.bot_id}"
        delays = self.backoff_delays(self.reconnect_first_delay)
        try:
            while True:
                self.state, self.detail = "connecting", ""
                try:
                    await session()
                    detail = self.closed_detail
                except ConnectionClosedError as exc:
                    if exc.fatal:
                        self.state, self.detail = "error", str(exc)
                        logger.error("%s: %s", name, exc)
                        await asyncio.sleep(self.fatal_retry_delay)
                        continue
                    detail = str(exc)
                except (OSError, TimeoutError, websockets.WebSocketException, PlatformAPIError, ValueError) as exc:
                    detail = f"{type(exc).__name__}: {exc}"
                if self.state == "connected":
                    delays = self.backoff_delays(self.reconnect_first_delay)
                delay = next(delays)
                logger.warning("%s: %s; reconnecting in %.1fs", name, detail, delay)
                await self.sleep_backoff(delay, detail)
        finally:
            self.state = "stopped"
            await self.adapter.aclose()
