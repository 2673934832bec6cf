"""The context builder: the event-first `AgentRunContext` of one run (docs/protocol.md, "The run context") and the run
session frozen beside it.

Inlined: the current event, its input (as the runner's `multimodal_input` capability lets it take it:
`runners.orchestrator.capabilities`), conversation/actor/subject with LangBot's launcher (`person` and
the sender, or `group` and the chat), delivery, the authorized resources, context handles, the enabled
state scopes, the binding config, and the runtime's version, locale, static refs and
`metadata.streaming_supported`. Not inlined: history, unless the runner's context policy asks
(docs/context-and-results.md, "What is inlined"): `bootstrap: recent_tail` (or `ownership:
host_bootstrap`/`hybrid`) gets the most recent transcript items, at most `max_inline_events` of them and
`max_inline_bytes` in total (both must be > 0); `summary_tail` gets a summary too: the runner's own
checkpoint (conversation state `summary.checkpoint`) when it owns compaction, else the host's digest of
the items before the tail. `bootstrap: none` inlines nothing and says so.

Cursors: `context.latest_cursor` is the id of the newest TranscriptItem of the conversation *before*
the current input (the user item written for this event), i.e. where a runner starts paging backwards;
`transcript_seq` is the id of that current input item, `event_seq` the EventLog id of the event. Every
query here is an indexed lookup with a LIMIT, so building a context costs the same for 10 or 100,000
prior items; only a runner that asks for inline history has the items before the current one counted
(`source_total_count`), and that count stops at `SOURCE_COUNT_MAX`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.translation import to_locale
from pydantic import ValidationError

from artifacts.selectors import runner_upload_max_bytes
from bindings.models import AgentBinding, RunnerDescriptor
from bindings.policies import DeliveryPolicy, ResourcePolicy, StatePolicy
from bindings.services import binding_runner_config_plain
from bindings.triggers import chat_kind_of
from foundation.version import HOST_VERSION
from langbot_sdk.protocol import (
    PERSON_ID_KEY,
    PERSON_NAME_KEY,
    ActorContext,
    AgentEventContext,
    AgentInput,
    AgentRunContext,
    AgentRunnerManifest,
    AgentRunRequest,
    AgentRunState,
    AgentRuntimeContext,
    AgentTrigger,
    BootstrapContext,
    ContentElement,
    ContextAccess,
    ConversationContext,
    DeliveryContext,
    InlineContextPolicy,
    Message,
    RawEventRef,
    StaticContextRef,
    SubjectContext,
)
from resources.knowledge.selectors import knowledge_bases_by_id
from resources.mcp.selectors import tools_by_name
from resources.selectors import models_by_id
from runners.access.scope import RunScope
from runners.access.session import HistoryGrant, RunSession
from runners.actions.delivery import surface_delivery
from runners.models import Run
from runners.orchestrator.capabilities import input_for_runner, runner_streams
from runners.orchestrator.people import person_of_event_actor
from runners.orchestrator.resources import resources_build
from runners.takeover.services import takeover_context_fact
from transcripts.models import EventLog, TranscriptItem
from transcripts.state import state_snapshot

logger = logging.getLogger(__name__)

TRIGGER_SOURCES = frozenset({"platform", "webui", "api", "scheduler", "system", "pipeline_adapter"})
# Hard host caps on a bootstrap, whatever a manifest asks for.
BOOTSTRAP_MAX_EVENTS = 100
BOOTSTRAP_MAX_BYTES = 1024 * 1024
# The items before the current one are counted up to this many (`source_total_count`); past it the count
# is left unset rather than paid for.
SOURCE_COUNT_MAX = 10_000
# Where a runner that owns compaction keeps its summary (conversation state, its own runner+binding key).
SUMMARY_CHECKPOINT_KEY = "summary.checkpoint"
# The host's digest (`summary_tail` of a runner that does not own compaction): at most this many items
# before the tail, each cut to `SUMMARY_ITEM_CHARS`.
SUMMARY_MAX_ITEMS = 20
SUMMARY_ITEM_CHARS = 200


@dataclass
class BuiltContext:
    """`request` is the `run_agent` payload; empty until the state snapshot is in (see `context_state_set`)."""

    context: AgentRunContext
    session: RunSession
    request: dict[str, Any]
    # The scope -> state key map of the snapshot this context inlines (empty when state is off).
    state_keys: dict[str, str] = field(default_factory=dict)
    runner_id: str = ""
    runner_name: str = ""
    # Which runtime serves the runner (`runtimes.hosts`): source and connection key.
    runner_source: str = ""
    runner_source_key: str = ""
    # `summary_tail` of a runner that owns compaction: its checkpoint comes with the state snapshot.
    summary_from_state: bool = False


def _checkpoint_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("text") or value.get("summary")
    return value if isinstance(value, str) and value.strip() else None


def context_state_set(built: BuiltContext, snapshot: dict[str, dict[str, Any]]) -> None:
    """Inline the state snapshot read for `built.state_keys` and produce the `run_agent` request."""
    if built.session.state_enabled:
        built.context = built.context.model_copy(update={"state": AgentRunState.model_validate(snapshot)})
    if built.summary_from_state:
        _summary_from_state(built, (snapshot.get("conversation") or {}).get(SUMMARY_CHECKPOINT_KEY))
    request = AgentRunRequest(
        runner_id=built.runner_id,
        runner_name=built.runner_name,
        context=built.context,
        run_token=built.session.run_token,
    )
    built.request = request.model_dump(mode="json")


_MANIFESTS_MAX = 256
_manifests: dict[tuple[str, str], AgentRunnerManifest] = {}


def descriptor_manifest(descriptor: RunnerDescriptor) -> AgentRunnerManifest:
    """The runner's manifest as last synced; parsed once per manifest version (the sync stores the
    manifest's digest beside it, so the digest names the version without re-serializing it per run).
    Manifests are never mutated by their readers."""
    # A descriptor written without a digest (tests, hand-made rows) is keyed by its content.
    digest = descriptor.manifest_sha256 or json.dumps(descriptor.manifest, sort_keys=True)
    key = (descriptor.runner_id, digest)
    manifest = _manifests.get(key)
    if manifest is None:
        manifest = AgentRunnerManifest.model_validate(descriptor.manifest)
        if len(_manifests) >= _MANIFESTS_MAX:
            _manifests.clear()
        _manifests[key] = manifest
    return manifest


def _epoch(value: datetime | None) -> int | None:
    return int(value.timestamp()) if value is not None else None


def _lenient(model: Any, data: Any) -> Any:
    if not isinstance(data, dict) or not data:
        return None
    try:
        return model.model_validate(data)
    except ValidationError:
        logger.warning("ignored an invalid %s in an event: %r", model.__name__, data)
        return None


def _identity(data: Any, type_key: str, id_key: str) -> str:
    if not isinstance(data, dict) or not data.get(id_key):
        return ""
    return f"{data.get(type_key) or 'unknown'}:{data[id_key]}"


def _event_context(event: EventLog) -> AgentEventContext:
    raw_ref = None
    if isinstance(event.raw_ref, dict) and event.raw_ref:
        raw_ref = RawEventRef(
            source=event.source,
            artifact_id=str(event.raw_ref.get("artifact_id") or "") or None,
            size=event.raw_ref.get("size") if isinstance(event.raw_ref.get("size"), int) else None,
            mime_type=event.raw_ref.get("mime_type"),
        )
    return AgentEventContext(
        event_id=event.event_id,
        event_type=event.event_type,
        event_time=_epoch(event.event_time or event.created_at),
        source=event.source,
        source_event_type=event.source_event_type or None,
        raw_ref=raw_ref,
        data=event.data or {},
    )


def _input(event: EventLog) -> AgentInput:
    try:
        return AgentInput.model_validate(event.input or {})
    except ValidationError:
        text = (event.input or {}).get("text") if isinstance(event.input, dict) else None
        return AgentInput(text=text if isinstance(text, str) else None)


def _message(item: TranscriptItem) -> Message:
    content: str | list[ContentElement] = item.content
    if item.contents:
        try:
            content = [ContentElement.model_validate(part) for part in item.contents]
        except ValidationError:
            content = item.content
    return Message(role=item.role, content=content)


def _item_bytes(item: TranscriptItem) -> int:
    size = len(item.content.encode("utf-8"))
    if item.contents:
        size += len(json.dumps(item.contents, ensure_ascii=False).encode("utf-8"))
    return size


def _bootstrap(history: Any, *, max_events: int, max_bytes: int) -> tuple[BootstrapContext | None, InlineContextPolicy]:
    max_events = min(max_events, BOOTSTRAP_MAX_EVENTS)
    max_bytes = min(max_bytes, BOOTSTRAP_MAX_BYTES)
    if max_events <= 0 or max_bytes <= 0:
        return None, InlineContextPolicy(mode="current_event", reason="the runner's inline limits are 0")
    # One extra row tells whether older items exist, without counting the conversation.
    newest_first = list(history.order_by("-id")[: max_events + 1])
    complete = len(newest_first) <= max_events
    kept: list[TranscriptItem] = []
    used = 0
    for item in newest_first[:max_events]:
        size = _item_bytes(item)
        if used + size > max_bytes:
            complete = False
            break
        kept.append(item)
        used += size
    kept.reverse()
    policy = InlineContextPolicy(
        mode="recent_tail",
        delivered_count=len(kept),
        # Every item before the current one fitted: the count is known without counting.
        source_total_count=len(kept) if complete else None,
        messages_complete=complete,
        reason=f"runner asked for a recent tail of at most {max_events} items / {max_bytes} bytes",
    )
    # Where the tail starts: a runner that wants more pages backwards from here (`before_cursor`).
    metadata = {"oldest_cursor": str(kept[0].pk)} if kept else {}
    return BootstrapContext(messages=[_message(item) for item in kept], metadata=metadata), policy


def _inline_described(
    inline: InlineContextPolicy, *, policy: Any, history: Any, bootstrap: BootstrapContext | None
) -> InlineContextPolicy:
    """`source_total_count` (a bounded count when the tail is not the whole history) and the ownership the
    inline was made for."""
    update: dict[str, Any] = {}
    if inline.source_total_count is None and bootstrap is not None:
        counted = history()[: SOURCE_COUNT_MAX + 1].count()
        update["source_total_count"] = counted if counted <= SOURCE_COUNT_MAX else None
    if policy.ownership == "hybrid":
        update["reason"] = f"{inline.reason}; hybrid: the runner pages the history API for more"
    elif policy.ownership == "host_bootstrap":
        update["reason"] = f"{inline.reason}; host_bootstrap: the host's window is the runner's context"
    return inline.model_copy(update=update) if update else inline


def _with_host_digest(
    bootstrap: BootstrapContext, inline: InlineContextPolicy, history: Any
) -> tuple[BootstrapContext, InlineContextPolicy]:
    oldest = bootstrap.metadata.get("oldest_cursor")
    if inline.messages_complete or not oldest:
        reason = f"{inline.reason}; nothing before the tail to summarize"
        return bootstrap, inline.model_copy(update={"mode": "recent_tail", "reason": reason})
    older = list(history().filter(id__lt=int(oldest)).order_by("-id")[:SUMMARY_MAX_ITEMS])
    older.reverse()
    total = inline.source_total_count
    before = total - inline.delivered_count if total is not None else None
    digest = _host_digest(older, before)
    bootstrap = bootstrap.model_copy(
        update={"summary": digest, "metadata": {**bootstrap.metadata, "summary_source": "host_digest"}}
    )
    reason = f"{inline.reason}; summary: the host's digest of the {len(older)} items before the tail"
    return bootstrap, inline.model_copy(update={"mode": "summary_tail", "reason": reason})


def _summary_from_state(built: BuiltContext, checkpoint: Any) -> None:
    """The runner's own summary checkpoint as `bootstrap.summary`; without one the inline is a plain tail, and
    says why."""
    access = built.context.context
    inline = access.inline_policy
    text = _checkpoint_text(checkpoint)
    if text is not None:
        bootstrap = built.context.bootstrap or BootstrapContext()
        bootstrap = bootstrap.model_copy(
            update={"summary": text, "metadata": {**bootstrap.metadata, "summary_source": "runner_checkpoint"}}
        )
        inline = inline.model_copy(update={"mode": "summary_tail", "reason": f"{inline.reason}; summary: {_CKPT}"})
        built.context = built.context.model_copy(update={"bootstrap": bootstrap})
    else:
        mode = "recent_tail" if inline.delivered_count else "current_event"
        reason = f"{inline.reason}; no summary yet: the runner owns compaction and has no {_CKPT}"
        inline = inline.model_copy(update={"mode": mode, "reason": reason})
    built.context = built.context.model_copy(update={"context": access.model_copy(update={"inline_policy": inline})})


_CKPT = f"conversation state {SUMMARY_CHECKPOINT_KEY!r}"


def _host_digest(older: list[TranscriptItem], total_before: int | None) -> str:
    """The host's summary of the items before the tail: not a semantic summary (the host makes none), an
    abbreviated, deterministic digest — how many there are, then the last `SUMMARY_MAX_ITEMS` of them,
    one line each, oldest first."""
    lines = []
    for item in older:
        text = " ".join(item.content.split())
        if len(text) > SUMMARY_ITEM_CHARS:
            text = text[: SUMMARY_ITEM_CHARS - 1] + "…"
        lines.append(f"{item.role}: {text}")
    count = f"{total_before} earlier items" if total_before is not None else "earlier items"
    head = f"Earlier in this conversation ({count}; the last {len(older)} before the recent messages, abbreviated):"
    return "\n".join([head, *lines])


def _launcher(event: EventLog) -> tuple[str | None, str | None]:
    """LangBot's launcher of the conversation: `group` and the chat id in a group chat, else `person` and
    the sender (so a runner names users and groups as LangBot does)."""
    data = event.data if isinstance(event.data, dict) else {}
    chat_id = data.get("chat_id")
    if chat_kind_of(data.get("chat_type")) == "group" and isinstance(chat_id, str | int) and str(chat_id):
        return "group", str(chat_id)
    actor = event.actor if isinstance(event.actor, dict) else {}
    if actor.get("actor_id"):
        return "person", str(actor["actor_id"])
    return None, None


def _locale(event: EventLog) -> str:
    """The event's locale (`data.locale`, or the sender's language a platform reported), else the host's
    language, in LangBot's spelling (`en_US`, `zh_Hans`), the keys of a manifest's i18n texts."""
    data = event.data if isinstance(event.data, dict) else {}
    actor = event.actor if isinstance(event.actor, dict) else {}
    metadata = actor.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    for value in (data.get("locale"), metadata.get("language_code")):
        if isinstance(value, str) and 0 < len(value) <= 35:
            return to_locale(value.replace("_", "-"))
    return to_locale(settings.LANGUAGE_CODE)


def _static_ref(ref: str, content: Any, version: str | None = None) -> StaticContextRef:
    encoded = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode()
    return StaticContextRef(
        ref=ref, version=version, hash=f"sha256:{hashlib.sha256(encoded).hexdigest()}", size=len(encoded)
    )


def _static_refs(
    descriptor: RunnerDescriptor, manifest: AgentRunnerManifest, config: dict[str, Any], resources: Any
) -> dict[str, StaticContextRef]:
    """Refs with a hash and size for what stays the same from run to run (`wants_static_context_refs`), so a
    runner can keep its prompt prefix (and a model's KV cache) while the hash does not change."""
    plugin = manifest.metadata.get("plugin") if isinstance(manifest.metadata.get("plugin"), dict) else {}
    version = str(plugin.get("version")) if plugin and plugin.get("version") else None
    return {
        "runner_manifest": _static_ref(f"runner:{descriptor.runner_id}", descriptor.manifest, version),
        "binding_config": _static_ref("binding:config", config),
        "resources": _static_ref("run:resources", resources.model_dump(mode="json")),
        "tool_schemas": _static_ref(
            "run:tools", [t.model_dump(mode="json", include={"tool_name", "parameters"}) for t in resources.tools]
        ),
    }


def _with_person(actor: ActorContext | None, person: tuple[str, str] | None) -> ActorContext | None:
    """The actor with `metadata.person_id` / `person_name` of their person (docs/protocol.md, "The run context")."""
    if actor is None or person is None:
        return actor
    metadata = {**actor.metadata, PERSON_ID_KEY: person[0], PERSON_NAME_KEY: person[1]}
    return actor.model_copy(update={"metadata": metadata})


@dataclass(frozen=True)
class Prefetched:
    """What the worker's run load (`runners.sql.run_load`) read beside the run, so that building the
    context needs no query of its own for it."""

    upload_max_bytes: int | None  # the workspace's own setting; None: the host's default
    released_hold: bool  # the conversation has a released hold (else no `human_takeover` fact is owed)


def _takeover_fact(run: Run, prefetched: Prefetched | None = None) -> dict[str, Any]:
    """`metadata.human_takeover` for the first run after a person handed the conversation back."""
    if prefetched is not None and not prefetched.released_hold:
        return {}
    fact = takeover_context_fact(run=run)
    return {"human_takeover": fact} if fact is not None else {}


def context_build(
    *,
    run: Run,
    event: EventLog,
    binding: AgentBinding,
    descriptor: RunnerDescriptor,
    deadline_at: datetime,
    handles: tuple[int | None, int | None] | None = None,
    prefetched: Prefetched | None = None,
    read_state: bool = True,
) -> BuiltContext:
    """Build the run context and its session. `handles` — (current input item id, newest item id before
    it) — may be given by a caller that read them with the run (the worker's claim) to spare the two
    lookups; `prefetched`, what the same read found of the upload limit and a released hold, spares two
    more. Raises `ValueError` when the binding or manifest cannot
    be turned into a context (the run then fails with `context.invalid`).

    With `read_state=False` the state snapshot is left to the caller (the worker reads it in the same
    statement that claims the run) and must be handed to `context_state_set` before the request exists."""
    manifest = descriptor_manifest(descriptor)
    config = binding_runner_config_plain(binding)
    try:
        resource_policy = ResourcePolicy.model_validate(binding.resource_policy or {})
        state_policy = StatePolicy.model_validate(binding.state_policy or {})
        delivery_policy = DeliveryPolicy.model_validate(binding.delivery_policy or {})
    except ValidationError as exc:
        raise ValueError(f"binding {binding.binding_id} has an invalid policy: {exc}") from exc
    resources, apis = resources_build(
        permissions=manifest.permissions,
        context_policy=manifest.context,
        schema=manifest.config_schema,
        config=config,
        resource_policy=resource_policy,
        state_policy=state_policy,
        models_read=lambda model_ids: models_by_id(workspace_id=run.workspace_id, model_ids=model_ids),
        tools_read=lambda names: tools_by_name(workspace_id=run.workspace_id, tool_names=names),
        knowledge_bases_read=lambda kb_ids: knowledge_bases_by_id(workspace_id=run.workspace_id, kb_ids=kb_ids),
    )
    # Uploads need no manifest permission: the workspace's limit alone opens them (0 turns them off).
    if prefetched is None:
        upload_max = runner_upload_max_bytes(workspace_id=run.workspace_id)
    elif prefetched.upload_max_bytes is None:
        upload_max = int(settings.LANGBOT_ARTIFACT_RUNNER_UPLOAD_MAX_BYTES)
    else:
        upload_max = int(prefetched.upload_max_bytes)
    apis = apis.model_copy(update={"artifact_upload": upload_max > 0})
    workspace = run.workspace
    bot = run.bot
    run_id = str(run.run_id)
    # The person the actor is linked to (README "People"): named beside the actor, keys the `person` scope.
    person = person_of_event_actor(
        workspace_id=run.workspace_id, channel=bot.platform if bot is not None else event.source, actor=event.actor
    )
    scope = RunScope(
        workspace_id=run.workspace_id,
        workspace=workspace.slug,
        runner_id=run.runner_id,
        binding_id=run.binding_key,
        bot_id=bot.bot_id if bot is not None else "",
        conversation_id=run.conversation_id,
        thread_id=run.thread_id,
        actor_id=_identity(event.actor, "actor_type", "actor_id"),
        subject_id=_identity(event.subject, "subject_type", "subject_id"),
        person_id=person[0] if person is not None else "",
    )
    session = RunSession(
        run_id=run_id,
        run_pk=run.pk,
        lease_token="",
        plugin_identity=f"{descriptor.plugin_author}/{descriptor.plugin_name}",
        scope=scope,
        resources=resources,
        available_apis=apis,
        state_enabled=resources.state.enabled,
        state_scopes=frozenset(str(s) for s in resources.state.scopes),
        history_grant=(
            HistoryGrant(
                conversations=frozenset(resource_policy.history_conversations),
                same_actor=resource_policy.history_same_actor,
            )
            if resources.history.cross_conversation
            else HistoryGrant()
        ),
    )

    # Context handles: the current input's transcript item and the newest item before it.
    current_item = None
    latest_cursor = None
    bootstrap: BootstrapContext | None = None
    policy = manifest.context
    summary_from_state = False
    if policy.bootstrap == "none":
        inline = InlineContextPolicy(mode="none", reason="the runner asked for no inline context (bootstrap: none)")
    else:
        inline = InlineContextPolicy(mode="current_event", reason="only the current event is inlined")
    if run.conversation_id:
        if handles is None:
            current_item = (
                TranscriptItem.objects.filter(event_id=event.pk, role=TranscriptItem.Role.USER)
                .values_list("id", flat=True)
                .first()
            )
        else:
            current_item = handles[0]

        def history() -> Any:
            return TranscriptItem.objects.filter(
                workspace_id=run.workspace_id,
                conversation_id=run.conversation_id,
                **({"id__lt": current_item} if current_item is not None else {}),
            )

        latest_cursor = (
            handles[1] if handles is not None else history().order_by("-id").values_list("id", flat=True).first()
        )
        # `host_bootstrap` and `hybrid` both get a tail unless they asked for none; `hybrid` keeps its pull
        # APIs for more (its context says so), `host_bootstrap` is meant to be served by the tail alone.
        wants_tail = policy.bootstrap in ("recent_tail", "summary_tail") or (
            policy.ownership in ("host_bootstrap", "hybrid") and policy.bootstrap != "none"
        )
        if wants_tail and latest_cursor is not None:
            bootstrap, inline = _bootstrap(
                history(), max_events=policy.max_inline_events, max_bytes=policy.max_inline_bytes
            )
            inline = _inline_described(inline, policy=policy, history=history, bootstrap=bootstrap)
            if bootstrap is not None and policy.bootstrap == "summary_tail":
                if policy.owns_compaction:
                    summary_from_state = True
                else:
                    bootstrap, inline = _with_host_digest(bootstrap, inline, history)
        elif wants_tail:
            inline = InlineContextPolicy(
                mode="current_event", messages_complete=True, source_total_count=0, reason="no history yet"
            )

    keys: dict[str, str] = {}
    if session.state_enabled:
        keys = {s: k for s in session.state_scopes if (k := scope.state_key(s)) is not None}

    surface = bot.platform if bot is not None else event.source
    replies = not run.is_observer and delivery_policy.enable_reply
    # What the surface itself can do (a chat platform's adapter declares it); the binding may only narrow it.
    surfaced = surface_delivery(surface, credentials=bot.credentials if bot is not None else None)
    sizes = [s for s in (delivery_policy.max_message_size, surfaced.max_message_size) if s is not None]
    delivery = DeliveryContext(
        surface=surface,
        reply_target=(
            {"conversation_id": run.conversation_id, "thread_id": run.thread_id or None, "bot_id": scope.bot_id or None}
            if replies
            else None
        ),
        supports_streaming=delivery_policy.enable_streaming and surfaced.supports_streaming,
        supports_edit=surfaced.supports_edit,
        supports_reaction=surfaced.supports_reaction,
        max_message_size=min(sizes) if sizes else None,
        platform_capabilities={"reply": replies, **surfaced.capabilities},
    )
    launcher_type, launcher_id = _launcher(event)
    static_refs = _static_refs(descriptor, manifest, config, resources) if policy.wants_static_context_refs else {}
    session.streams = runner_streams(manifest) and delivery.supports_streaming
    context = AgentRunContext(
        run_id=run_id,
        trigger=AgentTrigger(
            type=event.event_type,
            source=event.source if event.source in TRIGGER_SOURCES else "platform",
            timestamp=_epoch(event.created_at),
        ),
        event=_event_context(event),
        conversation=ConversationContext(
            conversation_id=run.conversation_id or None,
            thread_id=run.thread_id or None,
            launcher_type=launcher_type,
            launcher_id=launcher_id,
            bot_id=scope.bot_id or None,
            workspace_id=workspace.slug,
        ),
        actor=_with_person(_lenient(ActorContext, event.actor), person),
        subject=_lenient(SubjectContext, event.subject),
        input=input_for_runner(_input(event), manifest),
        delivery=delivery,
        resources=resources,
        context=ContextAccess(
            conversation_id=run.conversation_id or None,
            thread_id=run.thread_id or None,
            latest_cursor=str(latest_cursor) if latest_cursor is not None else None,
            event_seq=event.pk,
            transcript_seq=current_item,
            has_history_before=latest_cursor is not None,
            inline_policy=inline,
            available_apis=apis,
        ),
        state=AgentRunState(),
        runtime=AgentRuntimeContext(
            langbot_version=HOST_VERSION,
            trace_id=run.trace_hex,  # the run's OpenTelemetry trace (foundation/tracing.py)
            deadline_at=deadline_at.timestamp(),
            locale=_locale(event),
            timezone=settings.TIME_ZONE,
            static_refs=static_refs,
            # LangBot's runners read this to choose between streaming and one reply.
            metadata={"streaming_supported": delivery.supports_streaming},
        ),
        config=config,
        bootstrap=bootstrap,
        metadata={"binding_id": run.binding_key, "observer": run.is_observer, **_takeover_fact(run, prefetched)},
    )
    built = BuiltContext(
        context=context,
        session=session,
        request={},
        state_keys=keys,
        runner_id=descriptor.runner_id,
        runner_name=descriptor.runner_name,
        runner_source=descriptor.source,
        runner_source_key=descriptor.source_key,
        summary_from_state=summary_from_state,
    )
    if read_state:
        context_state_set(built, state_snapshot(workspace_id=run.workspace_id, scope_keys=keys))
    return built
