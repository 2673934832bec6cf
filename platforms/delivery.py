"""The host's delivery policy on chat platforms: a run's results become messages on the chat its event
came from, whatever the platform.

- Streaming: while a run streams, its text is shown by sending one message and editing it, no more often
  than the adapter's `write_interval_seconds(chat)` (by default the platform's `edit_interval_seconds`;
  `LANGBOT_PLATFORM_EDIT_INTERVAL` may override it);
  the deltas that arrive in between are coalesced into the next edit. Every platform write waits for that
  interval, so bursts never exceed it. The last write always shows the final text (the runner's
  `message.completed`, else every delta joined).
- Splitting: text longer than the limit (the platform's `max_message_chars`, narrowed by the binding's
  `delivery_policy.max_message_size`) becomes several messages, cut on a paragraph, line, sentence or
  word boundary (`text_split`).
- Retries: a platform error with `retry_after` (HTTP 429) waits that long and tries again; other transient
  errors back off exponentially; after `MAX_ATTEMPTS` the delivery has failed.
- At most once: a write that may have been carried out although no answer says so (`PlatformAPIError.
  outcome_unknown`: the connection broke or timed out after the request left, a 5xx, a OneBot call with no
  response) is never made again, since a second send would post the message twice: the delivery fails
  with `platform_outcome_unknown` ("outcome unknown; not sent again"). Only a failure that provably
  happened before the request left (refused or timed-out connect, DNS, the pool, a 429) is retried. An
  edit to a given text is idempotent and retried either way. This one rule (`retry_allowed`) serves every
  platform; the adapters only classify their failures. Platform actions (`platform_action_carry_out`) are
  made once and never retried here; one whose outcome is unknown fails to the runner saying so.

The host's other calls with side effects are at most once too, or harmless to repeat: the SDK's proxy
client (`langbot_sdk.wire.connection.Connection.call`) sends a request once and never again — an answer
lost with the connection fails the call (`runtime_error`, retryable) and the runner decides; MCP tool calls
are never re-sent once they may have reached the server (`resources.mcp.client`); state and storage
writes are upserts of a value and deletes of a key, so the same write again leaves the same row; results
(`state.updated`, `artifact.created`, `action.requested`) come once on the run's stream and are written
under the run's lease; completion webhooks are retried by design and carry the same `webhook-id` on every
attempt, so receivers de-duplicate (Standard Webhooks).
- Records: every run's delivery leaves one `PlatformDelivery` row (messages sent, or the error); the run's
  outcome never changes because of it.
- Files: `artifact.created` results are uploaded after the text.
- Group replies: in a group chat the binding's `delivery_policy.group_reply` says how the reply points at
  the message it answers (`group_reply_target`): `quote` (the adapters' own reply: Telegram's reply, a Slack
  thread, a Discord reference, Lark's reply API, OneBot's reply segment), `plain` (a message of its own,
  `PlatformAdapter.plain_reply_target`) or `mention` (a message of its own that starts by @-mentioning the
  sender, `PlatformAdapter.mention_markup`; quoted where the platform cannot mention them). Private chats
  are answered as the adapter made the target.

`PlatformDeliveryPort` is what `runners` calls (installed by `PlatformsConfig.ready`): it answers what a
platform supports, carries out platform actions, and takes committed results on the worker's loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings

from artifacts.selectors import artifact_get
from artifacts.services import artifact_read_bytes
from bindings.models import Bot
from bindings.policies import DeliveryPolicy, GroupReply
from bindings.triggers import chat_kind_of
from foundation.tracing import span_around
from langbot_sdk.protocol import RunFailureCode
from platforms.interface import (
    OutboundFile,
    PlatformAdapter,
    PlatformAPIError,
    ReplyTarget,
    SentMessage,
)
from platforms.metrics import PLATFORM_DELIVERIES
from platforms.models import PlatformDelivery
from platforms.registry import adapter_class, adapter_for_bot
from runners.actions.delivery import DeliveryError, DeliveryTargetNotFoundError, SurfaceDelivery
from runners.models import Run, RunEvent
from runners.orchestrator.normalizer import delta_text

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BACKOFF_FIRST_SECONDS = 0.5
# A run that stops producing results without ending (its worker lost the lease) is given up after this.
IDLE_GIVE_UP_SECONDS = 900.0
_BOUNDARIES = (re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"[.!?。！？…](?=\s)|[。！？]"), re.compile(r"\s"))


def text_split(text: str, limit: int, length: Callable[[str], int] = len) -> list[str]:
    """`text` in pieces of at most `limit` (as `length` counts), cut at the last paragraph break, else line
    break, else sentence end, else space within the limit — a hard cut only when a piece has none."""
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        if length(rest) <= limit:
            pieces.append(rest)
            break
        hard = _prefix_within(rest, limit, length)
        cut = hard
        window = rest[:hard]
        for boundary in _BOUNDARIES:
            ends = [m.end() for m in boundary.finditer(window) if m.end() > hard // 3]
            if ends:
                cut = ends[-1]
                break
        piece = rest[:cut].strip()
        if piece:
            pieces.append(piece)
        rest = rest[cut:].strip()
    return pieces


def _prefix_within(text: str, limit: int, length: Callable[[str], int]) -> int:
    if length is len:
        return max(1, limit)
    used = 0
    for index, char in enumerate(text):
        used += length(char)
        if used > limit:
            return max(1, index)
    return len(text)


def retry_allowed(exc: PlatformAPIError, *, idempotent: bool) -> bool:
    """Whether a failed platform call may be made again: transient, and either provably not carried out
    or harmless to repeat (an edit to the same text)."""
    return exc.retryable and (idempotent or not exc.outcome_unknown)


def group_reply_target(
    adapter: PlatformAdapter, target: ReplyTarget, event: Any, mode: GroupReply
) -> tuple[ReplyTarget, str]:
    """Where a reply to `event` (an EventLog) goes, and the text put before it (a mention, with its space),
    as the binding's `group_reply` says for a group chat; any other chat's target is left as it is."""
    data = event.data if isinstance(event.data, dict) else {}
    if mode is GroupReply.QUOTE or chat_kind_of(data.get("chat_type")) != "group":
        return target, ""
    subject = event.subject if isinstance(event.subject, dict) else {}
    message_id = str(subject.get("subject_id") or "") or None if subject.get("subject_type") == "message" else None
    lead = ""
    if mode is GroupReply.MENTION:
        actor = event.actor if isinstance(event.actor, dict) else {}
        markup = adapter.mention_markup(actor) if actor.get("actor_id") else None
        if markup is None:
            return target, ""  # the platform cannot mention this sender: the reply quotes instead
        lead = f"{markup} "
    return adapter.plain_reply_target(target, message_id), lead


def _message_text(data: dict[str, Any]) -> str:
    message = data.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


class DeliveryFailedError(Exception):
    """The delivery gave up; `code` is what its `PlatformDelivery.error` records."""

    def __init__(self, message: str, *, code: str = "platform_error") -> None:
        super().__init__(message)
        self.code = code


OUTCOME_UNKNOWN_CODE = "platform_outcome_unknown"
OUTCOME_UNKNOWN_NOTE = "outcome unknown; not sent again"


class ChatPace:
    """When the bot last wrote to one chat. Shared by every run answering in that chat on this worker
    process, so two replies at once still keep to the platform's pace; writes to a chat take turns."""

    def __init__(self) -> None:
        self.last_write = -float("inf")
        self.turn = asyncio.Lock()


class PlatformWriter:
    """The writes of one run to one chat: paced, retried, counted."""

    def __init__(self, adapter: PlatformAdapter, *, interval: float, pace: ChatPace | None = None) -> None:
        self.adapter = adapter
        self.interval = interval
        self.pace = pace or ChatPace()
        self.calls = 0

    def wait_seconds(self) -> float:
        return self.pace.last_write + self.interval - time.monotonic()

    async def call(self, fn: Callable[..., Any], *args: Any, idempotent: bool = False) -> Any:
        """`fn(*args)`, retried as `retry_allowed` says; `idempotent` for a call that does nothing more
        when repeated (an edit to a given text)."""
        delay = BACKOFF_FIRST_SECONDS
        async with self.pace.turn:
            for attempt in range(1, MAX_ATTEMPTS + 1):
                wait = self.wait_seconds()
                if wait > 0:
                    await asyncio.sleep(wait)
                self.calls += 1
                try:
                    return await fn(*args)
                except PlatformAPIError as exc:
                    if exc.outcome_unknown and not idempotent:
                        raise DeliveryFailedError(f"{exc}: {OUTCOME_UNKNOWN_NOTE}", code=OUTCOME_UNKNOWN_CODE) from exc
                    if not retry_allowed(exc, idempotent=idempotent) or attempt == MAX_ATTEMPTS:
                        raise DeliveryFailedError(str(exc)) from exc
                    # The platform's own wait holds the chat's turn: nobody writes there until it is over.
                    pause = exc.retry_after if exc.retry_after is not None else delay
                    delay *= 2
                    logger.info("platform call failed (%s); retrying in %.1fs", exc, pause)
                    await asyncio.sleep(pause)
                finally:
                    self.pace.last_write = time.monotonic()
        raise DeliveryFailedError("unreachable")  # pragma: no cover


class ReplyStream:
    """One platform run's reply: fed with committed results, writes them to the chat at the platform's pace."""

    def __init__(
        self,
        run: Run,
        *,
        on_done: Callable[[ReplyStream], None],
        pace_for: Callable[[int, str], ChatPace] | None = None,
        adapter_for: Callable[[Bot], PlatformAdapter | None] | None = None,
    ) -> None:
        self.run = run
        self.on_done = on_done
        self.pace_for = pace_for
        self.adapter_for = adapter_for
        """Where a kept adapter comes from (the port's); without it the stream makes and closes its own."""
        self.inert = False
        """Set when the run's bot turned out to have nothing to deliver to (no adapter for its platform)."""
        self.streamed: list[str] = []
        self.final: str | None = None
        self.files: list[dict[str, Any]] = []
        self.ended = False
        self.wake = asyncio.Event()
        deliver = span_around("platform.deliver", self._deliver(), **{"langbot.run_id": str(run.run_id)})
        self.task = asyncio.get_running_loop().create_task(deliver, name=f"platform-reply {run.run_id}")

    def feed(self, events: Sequence[RunEvent], ended: bool) -> None:
        for event in events:
            if event.type == "message.delta":
                self.streamed.append(delta_text(event.data))
            elif event.type == "message.completed":
                self.final = _message_text(event.data)
            elif event.type == "run.failed" and event.data.get("code") == RunFailureCode.QUOTA_EXCEEDED.value:
                # The one failure the chat's user is told about: their budget is spent, and when it resets
                # (runners/access/budgets.py words it). Other failures are the operator's to read on the run.
                if self.final is None and not self.streamed:
                    self.final = str(event.data.get("message") or "")
            elif event.type == "artifact.created" and event.data.get("artifact_id"):
                # Without an id the host refused the artifact the run named (runners.orchestrator.ledger).
                self.files.append(event.data)
        self.ended = self.ended or ended
        self.wake.set()

    async def _deliver(self) -> None:
        try:
            await self._deliver_all()
        except Exception:
            logger.exception("run %s: platform delivery crashed", self.run.run_id)
        finally:
            self.on_done(self)

    async def _deliver_all(self) -> None:
        run = await Run.objects.select_related("bot__workspace", "event", "binding", "workspace").aget(pk=self.run.pk)
        bot = run.bot
        kept = self.adapter_for is not None
        if bot is None:
            adapter = None
        else:
            adapter = self.adapter_for(bot) if self.adapter_for is not None else adapter_for_bot(bot)
        target = ReplyTarget.from_event_data(run.event.data)
        policy = DeliveryPolicy.model_validate(run.binding.delivery_policy or {}) if run.binding else DeliveryPolicy()
        if adapter is None:
            self.inert = True
            return
        if bot is None or target is None or run.is_observer or not policy.enable_reply:
            return  # nothing to deliver to; results are still in the ledger and the transcript
        caps = adapter.capabilities
        target, lead = group_reply_target(adapter, target, run.event, policy.group_reply)
        limit = min(caps.max_message_chars, policy.max_message_size or caps.max_message_chars)
        override = settings.LANGBOT_PLATFORM_EDIT_INTERVAL
        writer = PlatformWriter(
            adapter,
            interval=float(override) if override is not None else adapter.write_interval_seconds(target),
            pace=self.pace_for(bot.pk, target.chat_id) if self.pace_for is not None else None,
        )
        streaming = policy.enable_streaming and caps.edit
        # Whether the runner streams (its run says so once it has started: `streaming: false` in the stored
        # authorization) is read at the first delta: a runner declaring `streaming: false` gets its reply
        # sent whole, never a message edited as pieces come.
        run_streams: bool | None = None
        sent: list[SentMessage] = []
        shown: list[str] = []
        error: dict[str, Any] | None = None

        async def show(text: str) -> None:
            for index, piece in enumerate(text_split(lead + text, limit, adapter.text_length)):
                if index < len(sent):
                    if shown[index] != piece:
                        await writer.call(adapter.edit_text, sent[index], piece, idempotent=True)
                        shown[index] = piece
                else:
                    sent.append(await writer.call(adapter.send_text, target, piece))
                    shown.append(piece)

        try:
            while not self.ended:
                try:
                    async with asyncio.timeout(IDLE_GIVE_UP_SECONDS):
                        await self.wake.wait()
                except TimeoutError:
                    break
                self.wake.clear()
                if self.ended or not streaming:
                    continue
                if run_streams is None:
                    run_streams = await _run_streams(run.pk)
                    streaming = run_streams
                    if not streaming:
                        continue
                # Wait out the pace here, so everything that arrives meanwhile goes into one edit.
                wait = writer.wait_seconds()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self.ended:
                    break
                text = "".join(self.streamed)
                if text.strip():
                    await show(text)
            final = self.final if self.final is not None else "".join(self.streamed)
            if final.strip():
                await show(final)
            for data in self.files:
                sent.append(await self._send_file(writer, adapter, target, run, data))
        except DeliveryFailedError as exc:
            error = {"code": exc.code, "message": str(exc)[:1000]}
            logger.warning("run %s: delivery to %s failed: %s", run.run_id, bot.platform, exc)
        finally:
            try:
                await adapter.reply_finished(target, list(sent), failed=error is not None)
            except PlatformAPIError as exc:
                logger.warning("run %s: the %s reply could not be closed: %s", run.run_id, bot.platform, exc)
            if not kept:
                await adapter.aclose()
        if sent or error:
            PLATFORM_DELIVERIES.labels(bot.platform, "failed" if error else "delivered").inc()
            await PlatformDelivery.objects.acreate(
                workspace_id=run.workspace_id,
                run=run,
                bot=bot,
                platform=bot.platform,
                status=PlatformDelivery.Status.FAILED if error else PlatformDelivery.Status.DELIVERED,
                chat_id=target.chat_id,
                message_ids=[m.message_id for m in sent],
                calls=writer.calls,
                error=error,
            )

    @staticmethod
    async def _send_file(
        writer: PlatformWriter, adapter: PlatformAdapter, target: ReplyTarget, run: Run, data: dict[str, Any]
    ) -> SentMessage:
        artifact = await sync_to_async(artifact_get)(workspace=run.workspace, artifact_id=str(data.get("artifact_id")))
        if artifact is None:
            raise DeliveryFailedError(f"artifact {data.get('artifact_id')} is gone")
        content = await sync_to_async(artifact_read_bytes)(artifact=artifact)
        file = OutboundFile(data=content, name=artifact.name or "file", mime_type=artifact.mime_type)
        result: SentMessage = await writer.call(adapter.send_file, target, file)
        return result


async def _run_streams(run_pk: int) -> bool:
    authorization = await Run.objects.filter(pk=run_pk).values_list("authorization", flat=True).afirst()
    delivery = (authorization or {}).get("delivery") if isinstance(authorization, dict) else None
    return bool((delivery or {}).get("streaming", True))


class PlatformDeliveryPort:
    """`runners.actions.delivery.DeliveryPort` for the chat platforms that have an adapter."""

    def __init__(self) -> None:
        self._streams: dict[int, ReplyStream] = {}
        # Bots whose platform has no adapter (web UI bots, say): their runs cost no task.
        self._inert_bots: set[int] = set()
        # Each bot's adapter for the loop it was made on, and the credentials it was made with.
        self._adapters: dict[int, tuple[str, asyncio.AbstractEventLoop, PlatformAdapter]] = {}
        self._retired: list[PlatformAdapter] = []
        self._closing: set[asyncio.Task[None]] = set()
        # A chat's pace lives as long as a reply to it is being written.
        self._paces: weakref.WeakValueDictionary[tuple[int, str], ChatPace] = weakref.WeakValueDictionary()

    def _adapter_for(self, bot: Bot) -> PlatformAdapter | None:
        """The bot's adapter, kept while its credentials stay the same: one client per bot and process,
        its connections reused by every reply (a new client costs a TLS context and a connection)."""
        fingerprint = hashlib.sha256(json.dumps(bot.credentials, sort_keys=True, default=str).encode()).hexdigest()
        loop = asyncio.get_running_loop()
        held = self._adapters.get(bot.pk)
        if held is not None and held[0] == fingerprint and held[1] is loop:
            return held[2]
        adapter = adapter_for_bot(bot)
        if held is not None and held[1] is loop:
            # Replies still using the old one keep it until they end; it is closed when dropped.
            self._retired.append(held[2])
        if adapter is None:
            self._adapters.pop(bot.pk, None)
        else:
            self._adapters[bot.pk] = (fingerprint, loop, adapter)
        return adapter

    def _pace_for(self, bot_pk: int, chat_id: str) -> ChatPace:
        pace = self._paces.get((bot_pk, chat_id))
        if pace is None:
            pace = self._paces[(bot_pk, chat_id)] = ChatPace()
        return pace

    def surface(self, surface: str, credentials: Mapping[str, Any] | None = None) -> SurfaceDelivery | None:
        cls = adapter_class(surface)
        if cls is None:
            return None
        caps = cls.capabilities_for(credentials) if credentials is not None else cls.capabilities
        return SurfaceDelivery(
            supports_streaming=caps.edit,
            supports_edit=caps.edit,
            supports_reaction=caps.reaction,
            max_message_size=caps.max_message_chars,
            actions=caps.actions,
            capabilities={"files_in": caps.files_in, "files_out": caps.files_out, "threads": caps.threads},
        )

    def results_observe(self, *, run: Run, events: Sequence[RunEvent], ended: bool) -> None:
        stream = self._streams.get(run.pk)
        if stream is None:
            if run.is_observer or run.bot_id in self._inert_bots:
                return
            platform = getattr(run.bot, "platform", None) if Run.bot.is_cached(run) else None
            if platform is not None and adapter_class(platform) is None and run.bot_id is not None:
                self._inert_bots.add(run.bot_id)
                return
            stream = ReplyStream(run, on_done=self._stream_done, pace_for=self._pace_for, adapter_for=self._adapter_for)
            self._streams[run.pk] = stream
        stream.feed(events, ended)

    @staticmethod
    async def _close(adapters: list[PlatformAdapter]) -> None:
        for adapter in adapters:
            await adapter.aclose()

    async def wait_idle(self) -> None:
        """Wait until every reply being delivered now is done (worker shutdown, tests)."""
        while self._streams:
            await asyncio.gather(*(s.task for s in list(self._streams.values())), return_exceptions=True)

    def _stream_done(self, stream: ReplyStream) -> None:
        self._streams.pop(stream.run.pk, None)
        if self._retired and not self._streams:
            retired, self._retired = self._retired, []
            closing = asyncio.get_running_loop().create_task(self._close(retired))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        if stream.inert and stream.run.bot_id is not None:
            self._inert_bots.add(stream.run.bot_id)

    def action_deliver(
        self, *, run: Run, action: str, target: dict[str, Any], payload: dict[str, Any]
    ) -> dict[str, Any]:
        return platform_action_carry_out(run=run, action=action, target=target, payload=payload)


def platform_action_carry_out(
    *, run: Run, action: str, target: dict[str, Any], payload: dict[str, Any]
) -> dict[str, Any]:
    """`message.send` / `message.edit` / `reaction.add` on the run's platform (docs/platform-actions.md). The target
    is the run's own chat unless it names a `chat_id` (only the run's chat is allowed)."""
    bot = run.bot
    adapter = adapter_for_bot(bot) if bot is not None else None
    if bot is None or adapter is None:
        raise DeliveryError("the run has no chat platform to act on")
    if action not in adapter.capabilities.actions:
        raise DeliveryError(f"{bot.platform} cannot {action}")
    home = ReplyTarget.from_event_data(run.event.data)
    if home is None:
        raise DeliveryTargetNotFoundError("the run's event names no chat to act in")
    chat = str(target.get("chat_id") or home.chat_id)
    if chat != home.chat_id:
        raise DeliveryTargetNotFoundError("target.chat_id is not this run's chat")
    text = payload.get("text")
    message_id = str(target.get("message_id") or "")

    async def act() -> dict[str, Any]:
        try:
            if action == "message.send":
                if not isinstance(text, str) or not text.strip():
                    raise DeliveryError("payload.text must be a non-empty string")
                sent = await adapter.send_text(ReplyTarget(chat_id=chat, thread_id=home.thread_id), text)
                return {"message_id": sent.message_id, "chat_id": sent.chat_id}
            if not message_id:
                raise DeliveryTargetNotFoundError("target.message_id is required")
            message = SentMessage(chat_id=chat, message_id=message_id)
            if action == "message.edit":
                if not isinstance(text, str) or not text.strip():
                    raise DeliveryError("payload.text must be a non-empty string")
                await adapter.edit_text(message, text)
                return {"message_id": message_id, "chat_id": chat}
            reaction = payload.get("reaction")
            if not isinstance(reaction, str) or not reaction or len(reaction) > 64:
                raise DeliveryError("payload.reaction must be a short non-empty string")
            await adapter.add_reaction(message, reaction)
            return {"message_id": message_id, "chat_id": chat, "reaction": reaction}
        except PlatformAPIError as exc:
            # Made once, never again here: a send whose answer was lost may be on the chat already, and
            # the runner reads that in the error (an edit it may repeat itself; a send it should not).
            note = f": {OUTCOME_UNKNOWN_NOTE}" if exc.outcome_unknown else ""
            error = DeliveryError(f"{bot.platform}: {exc}{note}")
            error.code = "runtime_error"
            raise error from exc
        finally:
            await adapter.aclose()

    result: dict[str, Any] = async_to_sync(act)()
    return result
