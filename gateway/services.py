"""Writes for host facts: accepting an event at the gateway (`event_ingest`).

`event_ingest` is the whole of `POST /api/v1/events` below the HTTP layer, written atomically: the
EventLog row (idempotent on the workspace's `event_id`), the user's transcript item, the binding
resolution and one queued run per chosen binding. Runs are sent to workers once they are committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from pydantic import ValidationError

from artifacts.attachments import AttachmentRefusedError, attachment_register
from artifacts.models import Artifact
from artifacts.selectors import artifacts_by_id
from artifacts.services import artifact_create_from_bytes, artifacts_bind_to_conversation
from bindings.models import AgentBinding, Bot, RunnerDescriptor, Workspace
from bindings.policies import DeliveryPolicy, NonTextInput
from bindings.selectors import BindingResolution, binding_resolve_for_event, bot_get
from bindings.triggers import TriggerContext, chat_kind_of, text_without_prefix
from foundation.api_errors import FieldsRefusedError
from foundation.sql import insert_with_children
from foundation.tracing import traced
from gateway.envelope import ContentIn, EventEnvelopeIn, EventSource
from gateway.rate_limits import event_rate_limit_check, rate_limit_refusal, rate_limit_reply_on_commit
from langbot_sdk.protocol import AgentInput, ArtifactRef, ContentElement
from people.commands import link_command_answer, link_command_of
from runners.lifecycle import services as run_services
from runners.live.publish import conversation_item_publish_on_commit
from runners.models import Run
from runners.orchestrator.capabilities import NON_TEXT_REFUSED_CODE, input_refusal
from runners.orchestrator.context import descriptor_manifest
from runners.takeover.services import conversation_held
from transcripts.models import EventLog, TranscriptItem

SUMMARY_TEXT_CHARS = 200
CONVERSATION_ID_MAX = 255


class EventRefusedError(FieldsRefusedError):
    """The envelope is well-formed but refers to things the workspace does not have; `fields` maps the
    dotted field to the message, like the API's `details.fields`."""


class InputUnsupportedError(EventRefusedError):
    """The replying binding refuses non-text input for its text-only runner (`delivery_policy.non_text_input:
    "refuse"`): the event is not recorded and no run starts; the API answers 400 `input.unsupported`."""

    code = NON_TEXT_REFUSED_CODE


class RateLimitedError(EventRefusedError):
    """An API or web-chat event over its binding's rate limit (gateway.rate_limits): refused, nothing
    stored; the API answers 429 `rate_limited` with `Retry-After`, the chat an error frame."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__({"rate_limit": message})
        self.message = message
        self.retry_after = retry_after


@dataclass
class EventIngestResult:
    event: EventLog
    runs: list[Run] = field(default_factory=list)
    duplicate: bool = False
    stored: bool = True
    """False for group chatter no binding answers (`unanswered_chatter`): `event` was never saved."""


def unanswered_chatter(envelope: EventEnvelopeIn, resolution: BindingResolution) -> bool:
    """Whether the event is a platform's group message that does not address the bot (`data.mentioned:
    false`, forwarded for bindings with `group_always`) and that no binding answers: it is not recorded at
    all, or every group's chatter would fill the event log. Events sent by API clients are always recorded
    (the client chose to send them and may look them up); a tie between bindings is recorded, to be seen."""
    return (
        envelope.source is EventSource.PLATFORM
        and envelope.is_message
        and envelope.data.get("mentioned") is False
        and chat_kind_of(envelope.data.get("chat_type")) == "group"
        and not resolution.to_run
        and not resolution.conflict
        and link_command_of(envelope.input.text) is None
    )


def conversation_id_derive(*, event_id: str, bot_id: str | None, data: dict[str, Any], actor_id: str | None) -> str:
    """The conversation of an event that names none (README "Conversations").

    With a bot and a chat (`data.chat_id`, else the actor's id) it is `bot:<bot_id>:<chat>`, so every
    message of one chat on one bot lands in one conversation; otherwise the event opens its own one-off
    conversation `evt:<event_id>`.
    """
    chat = data.get("chat_id")
    if chat is None or isinstance(chat, bool | dict | list) or str(chat) == "":
        chat = actor_id
    if bot_id and chat:
        derived = f"bot:{bot_id}:{chat}"
        if len(derived) > CONVERSATION_ID_MAX:
            # Still deterministic for very long chat ids, and within the column.
            derived = f"bot:{bot_id}:sha256:{hashlib.sha256(str(chat).encode()).hexdigest()}"
        return derived
    return f"evt:{event_id}"


def input_summary(*, text: str | None, contents: list[dict[str, Any]], attachment_count: int) -> str:
    """A one-line preview for lists and admin: the first 200 characters of the text, and the attachments."""
    preview = text or next((str(c.get("text")) for c in contents if c.get("type") == "text" and c.get("text")), "")
    preview = " ".join(preview.split())[:SUMMARY_TEXT_CHARS]
    if attachment_count:
        note = f"[{attachment_count} attachment{'s' if attachment_count != 1 else ''}]"
        preview = f"{preview} {note}" if preview else note
    return preview


def trigger_context_of(envelope: EventEnvelopeIn) -> TriggerContext:
    """What bindings' trigger filters see of an event: its text (`input.text`, else its first text part),
    chat type and chat id from `data`, the sender, and whether it addresses the bot (`data.mentioned`;
    true unless it says otherwise: the adapters that forward group messages not addressing the bot say so)."""
    data = envelope.data
    chat_id = data.get("chat_id")
    mentioned = data.get("mentioned")
    return TriggerContext(
        text=_trigger_text(envelope) or "",
        chat_kind=chat_kind_of(data.get("chat_type")),
        mentioned=mentioned if isinstance(mentioned, bool) else True,
        chat_id=str(chat_id) if isinstance(chat_id, str | int) and not isinstance(chat_id, bool) else None,
        user_id=envelope.actor.actor_id if envelope.actor else None,
        is_message=envelope.is_message,
    )


def _trigger_text(envelope: EventEnvelopeIn) -> str | None:
    if envelope.input.text:
        return envelope.input.text
    first = next((c for c in envelope.input.contents if c.type == "text"), None)
    text = getattr(first, "text", None)
    return text if isinstance(text, str) else None


def _prefix_stripped(envelope: EventEnvelopeIn, prefix: str) -> EventEnvelopeIn:
    """The envelope with the trigger prefix removed from the text it was matched in (LangBot's behaviour,
    which imported pipelines' prompts expect): the event, the transcript and the runner all see the rest."""
    if envelope.input.text:
        stripped_input = envelope.input.model_copy(update={"text": text_without_prefix(envelope.input.text, prefix)})
    else:
        contents = list(envelope.input.contents)
        index = next((i for i, c in enumerate(contents) if c.type == "text"), None)
        if index is None:
            return envelope
        part = contents[index].model_dump()
        contents[index] = ContentIn.model_validate({**part, "text": text_without_prefix(str(part["text"]), prefix)})
        stripped_input = envelope.input.model_copy(update={"contents": contents})
    return envelope.model_copy(update={"input": stripped_input})


def event_unanswered_chatter(*, workspace: Workspace, envelope: EventEnvelopeIn) -> bool:
    """`unanswered_chatter` of an event not yet ingested, resolved as `event_ingest` would: a platform
    update with files asks it before fetching them, so chatter no binding answers downloads nothing."""
    if envelope.data.get("mentioned") is not False:
        return False
    resolution = binding_resolve_for_event(
        workspace=workspace,
        event_type=envelope.event_type,
        bot_id=envelope.bot_id,
        trigger=trigger_context_of(envelope),
    )
    return unanswered_chatter(envelope, resolution)


@traced("gateway.ingest")
def event_ingest(
    *,
    workspace: Workspace,
    envelope: EventEnvelopeIn,
    resolution: BindingResolution | None = None,
    bot: Bot | None = None,
) -> EventIngestResult:
    """Record the event and create its runs, or return what an earlier delivery of the same `event_id`
    created (`duplicate=True`). Raises `EventRefusedError` for a bot or attachment the workspace lacks.

    `resolution` is the event's routing when the caller has already resolved it (the web chat checks the
    binding it was asked for); it must be for this workspace, event type and bot. Resolved here otherwise,
    with the bindings' trigger filters (`trigger_context_of`); a group prefix the replying binding's filter
    matched is removed from the input the event records.
    `bot` is the envelope's bot when the caller has just read it (a platform webhook found the bot its URL
    names): it is then not read a second time. Any other bot (or none) is looked up as usual.
    """
    bot = _bot_of_workspace(workspace, envelope.bot_id, known=bot)
    stored_attachments = _stored_attachments(workspace, envelope)
    event_id = envelope.event_id_or_new()
    conversation_id = envelope.conversation_id or conversation_id_derive(
        event_id=event_id,
        bot_id=bot.bot_id if bot else None,
        data=envelope.data,
        actor_id=envelope.actor.actor_id if envelope.actor else None,
    )
    if any(not a.is_stored for a in envelope.input.attachments):
        # Inline and URL attachments are stored (and fetched) before the transaction, so a slow fetch never
        # holds it open; a redelivered event is answered first so it stores nothing twice.
        earlier = EventLog.objects.filter(workspace=workspace, event_id=event_id).first()
        if earlier is not None:
            return EventIngestResult(event=earlier, runs=list(earlier.runs.order_by("id")), duplicate=True)
    if resolution is None:
        resolution = binding_resolve_for_event(
            workspace=workspace,
            event_type=envelope.event_type,
            bot_id=bot.bot_id if bot else None,
            trigger=trigger_context_of(envelope),
        )
    if unanswered_chatter(envelope, resolution):
        # Not recorded; a delivery recorded earlier (when a binding still answered) stays the event.
        earlier = EventLog.objects.filter(workspace=workspace, event_id=event_id).first()
        if earlier is not None:
            return EventIngestResult(event=earlier, runs=list(earlier.runs.order_by("id")), duplicate=True)
        unsaved = EventLog(
            workspace=workspace,
            event_id=event_id,
            event_type=envelope.event_type,
            source=envelope.source.value,
            bot=bot,
            conversation_id=conversation_id,
            status=EventLog.Status.NO_BINDING,
        )
        return EventIngestResult(event=unsaved, stored=False)
    # A conversation a person has taken over starts no run: the event and its transcript item are kept
    # and shown to the operator live (README "Human takeover").
    held = conversation_held(workspace_id=workspace.pk, conversation_id=conversation_id)
    if held:
        resolution = BindingResolution(strip_prefix=resolution.strip_prefix)
    # `/link` is the host's own command (README "People"): answered here, no binding sees it.
    link_code = link_command_of(envelope.input.text) if envelope.is_message else None
    if link_code is not None:
        resolution = BindingResolution(strip_prefix=resolution.strip_prefix)
    # Over the replying binding's rate limit (gateway.rate_limits): no run; the API and web chat are refused.
    limited = None
    if not held and link_code is None and resolution.replying is not None:
        limited = event_rate_limit_check(
            binding=resolution.replying, envelope=envelope, conversation_id=conversation_id, bot=bot
        )
        if limited is not None:
            refusal = rate_limit_refusal(limited, source=envelope.source)
            if refusal is not None and not EventLog.objects.filter(workspace=workspace, event_id=event_id).exists():
                raise RateLimitedError(refusal, retry_after=limited.retry_after)
            resolution = BindingResolution(strip_prefix=resolution.strip_prefix)
    resolution = _non_text_refusals(workspace, event_id, envelope, resolution)
    attachment_refs = _attachment_refs(workspace, envelope, stored_attachments, conversation_id)
    if resolution.strip_prefix:
        envelope = _prefix_stripped(envelope, resolution.strip_prefix)
    data = dict(envelope.data)
    raw = data.get("raw")
    raw_bytes = json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode() if raw is not None else b""
    # A large raw platform payload leaves the event (docs/protocol.md, "The run context"): it goes to an artifact below.
    raw_to_artifact = len(raw_bytes) > settings.LANGBOT_RAW_INLINE_MAX_BYTES
    if raw_to_artifact:
        del data["raw"]
    contents = [c.model_dump(mode="json", exclude_none=True) for c in envelope.input.contents]
    input_json = {
        "text": envelope.input.text,
        "contents": contents,
        "attachments": attachment_refs,
        **({"message_chain": envelope.input.message_chain} if envelope.input.message_chain is not None else {}),
    }

    status, error = (EventLog.Status.HELD, None) if held else _routing_outcome(resolution)
    if link_code is not None:
        status, error = EventLog.Status.ACCEPTED, None
    if limited is not None:
        status, error = EventLog.Status.RATE_LIMITED, limited.error()
    event = EventLog(
        workspace=workspace,
        event_id=event_id,
        event_type=envelope.event_type,
        source=envelope.source.value,
        source_event_type=envelope.source_event_type or "",
        event_time=envelope.event_time,
        bot=bot,
        conversation_id=conversation_id,
        thread_id=envelope.thread_id or "",
        actor=envelope.actor.model_dump(mode="json") if envelope.actor else None,
        subject=envelope.subject.model_dump(mode="json") if envelope.subject else None,
        input=input_json,
        input_summary=input_summary(text=envelope.input.text, contents=contents, attachment_count=len(attachment_refs)),
        data=data,
        status=status,
        error=error,
    )
    children: list[TranscriptItem | Run] = []
    # An over-limit message stays out of the transcript: no runner answered it, and a flood would fill
    # the history runners read later.
    if envelope.is_message and not envelope.input.is_empty and limited is None:
        children.append(
            TranscriptItem(
                workspace=workspace,
                conversation_id=conversation_id,
                thread_id=envelope.thread_id or "",
                role=TranscriptItem.Role.USER,
                content=envelope.input.text or "",
                contents=contents,
                artifacts=input_json["attachments"],
                actor=event.actor,
            )
        )
    # Runs that need no look at the conversation (`queue`, `parallel`) are written with the event.
    plain = {
        binding.pk: run_services.run_build(event=event, binding=binding, observer=binding is not resolution.replying)
        for binding in resolution.to_run
        if not run_services.run_create_checks(event=event, binding=binding)
    }
    children += plain.values()
    # The event, its transcript item and those runs are one statement (`insert_with_children`); a
    # transaction is only needed when more is written with them.
    writes_more = (
        bool(stored_attachments) or raw_to_artifact or len(plain) < len(resolution.to_run) or link_code is not None
    )
    with transaction.atomic() if writes_more else contextlib.nullcontext():
        # Losing the race for the (workspace, event_id) unique constraint writes nothing (ON CONFLICT DO
        # NOTHING) and leaves a transaction usable, so the winner's row can be read.
        if not insert_with_children(event, children, link="event", skip_conflicts=True):
            existing = EventLog.objects.filter(workspace=workspace, event_id=event_id).first()
            if existing is None:  # not the idempotency constraint: a genuine error
                raise IntegrityError(f"event {event_id} could not be recorded")
            return EventIngestResult(event=existing, runs=list(existing.runs.order_by("id")), duplicate=True)

        if held and children:
            user_item = children[0]
            conversation_item_publish_on_commit(
                workspace_id=workspace.pk,
                conversation_id=conversation_id,
                message={"type": "transcript.item", "action": "message.send", "item": held_item_out(user_item, event)},
            )
        if link_code is not None:
            link_command_answer(event=event, bot=bot, code=link_code)
        # Uploads made without a conversation become readable by this conversation's runs.
        artifacts_bind_to_conversation(artifacts=stored_attachments.values(), conversation_id=conversation_id)
        if raw_to_artifact:
            artifact = artifact_create_from_bytes(
                workspace=workspace,
                data=raw_bytes,
                name=f"raw-{event_id}.json",
                mime_type="application/json",
                conversation_id=conversation_id,
                source=Artifact.Source.RAW_EVENT,
                event=event,
            )
            event.raw_ref = {
                "artifact_id": str(artifact.artifact_id),
                "size": artifact.size,
                "mime_type": artifact.mime_type,
            }
            EventLog.objects.filter(pk=event.pk).update(raw_ref=event.raw_ref)

        runs: list[Run] = []
        for binding in resolution.to_run:
            run = plain.get(binding.pk)
            if run is None:
                run = run_services.run_create(event=event, binding=binding, observer=binding is not resolution.replying)
            else:
                run_services.run_dispatch_on_commit(run_id=str(run.run_id))
            runs.append(run)
        if limited is not None and envelope.is_message:
            rate_limit_reply_on_commit(event=event, bot=bot, hit=limited)
    return EventIngestResult(event=event, runs=runs)


def held_item_out(item: TranscriptItem | Run, event: EventLog) -> dict[str, Any]:
    """A user's message in a held conversation as the live group shows it to the operator."""
    assert isinstance(item, TranscriptItem)
    return {
        "message_id": str(item.pk),
        "role": item.role,
        "content": item.content,
        "contents": item.contents,
        "actor": item.actor,
        "event_id": event.event_id,
        "created_at": item.created_at.isoformat() if item.created_at else None,
    }


def _refuses_non_text(binding: AgentBinding) -> bool:
    try:
        return DeliveryPolicy.model_validate(binding.delivery_policy or {}).non_text_input is NonTextInput.REFUSE
    except ValidationError:  # an invalid stored policy fails the run with `context.invalid`, as before
        return False


def _non_text_refusals(
    workspace: Workspace, event_id: str, envelope: EventEnvelopeIn, resolution: BindingResolution
) -> BindingResolution:
    """Apply the bindings' `non_text_input: "refuse"` to an input with non-text parts sent to a runner that
    reads text only (runners.orchestrator.capabilities): the replying binding refusing it refuses the
    event (`InputUnsupportedError`, before anything is stored); an observer refusing it just does not run.
    A redelivery of an event already recorded is answered as a duplicate, never refused afterwards."""
    refusing = [b for b in resolution.to_run if _refuses_non_text(b)]
    if not refusing or not (envelope.input.attachments or any(c.type != "text" for c in envelope.input.contents)):
        return resolution
    agent_input = AgentInput(
        text=envelope.input.text,
        contents=[ContentElement.model_validate(c.model_dump(mode="json")) for c in envelope.input.contents],
        attachments=[
            ArtifactRef(artifact_id=a.artifact_id or "", name=a.name, mime_type=a.mime_type, size=a.size)
            for a in envelope.input.attachments
        ],
    )
    descriptors = {
        d.runner_id: d for d in RunnerDescriptor.objects.filter(runner_id__in={b.runner_id for b in refusing})
    }
    refused: dict[int, str] = {}
    for binding in refusing:
        descriptor = descriptors.get(binding.runner_id)
        try:
            manifest = descriptor_manifest(descriptor) if descriptor is not None else None
        except ValidationError:  # the run fails with `context.invalid`, as for any input
            manifest = None
        reason = input_refusal(agent_input, manifest, policy="refuse") if manifest is not None else None
        if reason is not None:
            refused[binding.pk] = reason
    if resolution.replying is not None and resolution.replying.pk in refused:
        if EventLog.objects.filter(workspace=workspace, event_id=event_id).exists():
            return resolution  # the earlier delivery's runs are answered below
        raise InputUnsupportedError({"input": refused[resolution.replying.pk]})
    return dataclasses.replace(resolution, observers=[b for b in resolution.observers if b.pk not in refused])


def _routing_outcome(resolution: BindingResolution) -> tuple[str, dict[str, Any] | None]:
    if resolution.conflict:
        return EventLog.Status.CONFLICT, {
            "code": "binding.conflict",
            "message": (
                "Several replying bindings tie for this event (same scope, same priority); nothing ran. "
                "Give one of them a higher priority or disable the others."
            ),
            "details": {"binding_ids": list(resolution.conflict)},
        }
    if not resolution.to_run:
        return EventLog.Status.NO_BINDING, None
    return EventLog.Status.ACCEPTED, None


def _bot_of_workspace(workspace: Workspace, bot_id: str | None, *, known: Bot | None = None) -> Bot | None:
    if bot_id is None:
        return None
    if known is not None and known.bot_id == bot_id and known.workspace_id == workspace.pk:
        bot: Bot | None = known
    else:
        bot = bot_get(workspace=workspace, bot_id=bot_id)
    if bot is None:
        raise EventRefusedError({"bot_id": f"No bot {bot_id!r} in this workspace."})
    if not bot.enabled:
        raise EventRefusedError({"bot_id": f"Bot {bot_id!r} is disabled."})
    return bot


def _stored_attachments(workspace: Workspace, envelope: EventEnvelopeIn) -> dict[str, Artifact]:
    """The workspace's artifacts named by `artifact_id` attachments; refuses ids it does not have."""
    given = [a.artifact_id for a in envelope.input.attachments if a.artifact_id is not None]
    if not given:
        return {}
    found = artifacts_by_id(workspace=workspace, artifact_ids=given)
    missing = {
        f"input.attachments.{index}.artifact_id": f"No artifact {attachment.artifact_id!r} in this workspace."
        for index, attachment in enumerate(envelope.input.attachments)
        if attachment.artifact_id is not None and attachment.artifact_id not in found
    }
    if missing:
        raise EventRefusedError(missing)
    return found


def _attachment_refs(
    workspace: Workspace, envelope: EventEnvelopeIn, stored: dict[str, Artifact], conversation_id: str
) -> list[dict[str, Any]]:
    """The `ArtifactRef` of every attachment, in order: stored ones as they are, inline and URL ones
    stored now (decoded or fetched through the SSRF-safe fetcher), platform refs kept as refs."""
    refs: list[dict[str, Any]] = []
    for index, attachment in enumerate(envelope.input.attachments):
        if attachment.artifact_id is not None:
            refs.append(stored[attachment.artifact_id].as_ref())
            continue
        try:
            refs.append(
                attachment_register(
                    workspace=workspace,
                    attachment=attachment.model_dump(exclude_none=True),
                    conversation_id=conversation_id,
                )
            )
        except AttachmentRefusedError as exc:
            raise EventRefusedError({f"input.attachments.{index}": str(exc)}) from None
    return refs
