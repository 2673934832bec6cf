"""`langbot_sdk.testing`: run a runner against an in-memory fake host, in a unit test, without the host.

What belongs here: `make_context` (a valid `AgentRunContext` in one line), `FakeHost` (seeded history,
events, state, storage and artifacts; scripted model, tool, knowledge and platform answers; a record of
every proxy call; messages steered into a running run), `load_runner` (a plugin directory loaded exactly as
the host's runtime loads it) and `RunOutcome` (the typed results of one run).

The runner runs in the real plugin runtime code (`langbot_sdk.runtime.service`) over an in-memory
connection, so result validation, sequencing, deadlines and cancellation behave as on the host. Every proxy
call goes through the same checks as on the host — request parsing and clamps, the deadline, then the
family's authorization against the run's snapshot — from `langbot_sdk.authorization`, the module the
host's proxy handlers call too. What the fake host cannot know is configuration that lives on a real host:
rate limits, provider failures you did not script, MCP servers, knowledge-base indexes.

    ctx = make_context("hi", models=["gpt"])
    host = FakeHost(ctx)
    host.models.reply("gpt", "hello!")
    outcome = await host.run(MyRunner())
    assert outcome.text == "hello!"
    assert host.calls[0].action == "invoke_llm"
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tenacity import AsyncRetrying, retry_if_result, wait_fixed

from langbot_sdk.authorization import (
    RunGrant,
    api_require,
    artifact_access,
    cursor_value,
    deadline_check,
    knowledge_authorize,
    model_authorize,
    model_kind_check,
    own_conversation,
    own_thread,
    page_cursors,
    platform_action_decision,
    platform_action_lookup_id,
    platform_action_outlive_split,
    platform_action_status_answer,
    request_parse,
    state_scope_key,
    storage_owner_key,
    tool_arguments_check,
    tool_authorize,
)
from langbot_sdk.protocol import (
    PERSON_ID_KEY,
    PERSON_NAME_KEY,
    PLATFORM_ACTION_GET,
    PROXY_REQUEST_MODELS,
    Action,
    ActorContext,
    AgentAPIError,
    AgentAPIException,
    AgentEventRecord,
    AgentInput,
    AgentRunContext,
    AgentRunnerCapabilities,
    AgentRunnerManifest,
    AgentRunResult,
    ArtifactMetadata,
    ArtifactReadResult,
    ArtifactStreamChunk,
    ArtifactUploadOpened,
    ArtifactUploadProgress,
    CallToolResult,
    CountTokensResult,
    ErrorCode,
    EventInputSummary,
    EventPage,
    HistoryPage,
    HistorySearchHit,
    HistorySearchResult,
    InvokeLLMResult,
    KnowledgeEntry,
    Message,
    PlatformActionResult,
    PlatformActionStatus,
    RerankItem,
    RerankResult,
    ResultType,
    RetrieveKnowledgeBaseResult,
    RunInput,
    RunInputResult,
    StateDeleteResult,
    StateGetResult,
    StateListResult,
    StateSetResult,
    StorageArea,
    StorageDeleteResult,
    StorageGetResult,
    StorageListResult,
    StorageResource,
    StorageSetResult,
    ToolDetail,
    TranscriptItem,
    limits,
)
from langbot_sdk.runner import AgentRunner
from langbot_sdk.runtime.loader import LoadedRunner, PluginRegistry, load_plugins
from langbot_sdk.runtime.service import RuntimeService
from langbot_sdk.uploads import UploadReceiver, upload_open_check
from langbot_sdk.wire import CallInfo, Connection, Handler
from langbot_sdk.wire.memory import memory_transport_pair

__all__ = [
    "FakeHost",
    "ProxyCallRecord",
    "RunOutcome",
    "load_runner",
    "make_context",
    "manifest_ceiling",
]

_STAMP_FIELDS = ("run_id", "caller_plugin_identity", "run_token")


# --- contexts ---------------------------------------------------------------------------------------


def make_context(
    text: str = "",
    *,
    run_id: str | None = None,
    conversation_id: str | None = "conv-1",
    thread_id: str | None = None,
    actor_id: str | None = "user-1",
    actor_name: str | None = None,
    event_type: str = "message.received",
    source: str = "api",
    config: Mapping[str, Any] | None = None,
    models: Iterable[str | Mapping[str, Any]] = (),
    tools: Iterable[str | Mapping[str, Any]] = (),
    knowledge_bases: Iterable[str | Mapping[str, Any]] = (),
    artifacts: Iterable[str | Mapping[str, Any]] = (),
    storage: Iterable[str] = (),
    state: Iterable[str] = (),
    history: bool = True,
    events: bool = True,
    platform_actions: Iterable[str] = (),
    require_action_approval: bool = True,
    deadline_in: float | None = 60.0,
    supports_streaming: bool = True,
    uploads: bool = True,
) -> AgentRunContext:
    """A valid `AgentRunContext` as a host would build it for one message.

    Resources are what the run is *granted*: `models`/`tools`/`knowledge_bases`/`artifacts` take ids (or
    full resource dicts), `storage` the areas (`plugin`, `workspace`, `binding`), `state` the enabled scopes
    (`conversation`, `actor`, `subject`, `runner`, `binding`); `history`/`events` open the history and event
    APIs and artifact reads of the conversation; `platform_actions` are the actions the binding allows;
    `uploads` opens `api.artifacts.upload` (as a host does when the workspace's upload limit is above 0).
    """

    def resources_of(items: Iterable[str | Mapping[str, Any]], key: str) -> list[dict[str, Any]]:
        return [{key: item} if isinstance(item, str) else dict(item) for item in items]

    run_id = run_id or str(uuid.uuid4())
    conversation = None
    if conversation_id is not None:
        conversation = {"conversation_id": conversation_id, "thread_id": thread_id}
    actor = {"actor_type": "user", "actor_id": actor_id, "actor_name": actor_name} if actor_id else None
    has_conversation = conversation_id is not None
    state_scopes, storage_areas = list(state), list(storage)
    apis = {
        "history_page": history and has_conversation,
        "history_search": history and has_conversation,
        "event_get": events and has_conversation,
        "event_page": events and has_conversation,
        "artifact_metadata": history,
        "artifact_read": history,
        "artifact_upload": uploads,
        "state": bool(state_scopes),
        "storage": bool(storage_areas),
    }
    data: dict[str, Any] = {
        "run_id": run_id,
        "trigger": {"type": event_type, "source": source, "timestamp": int(time.time() * 1000)},
        "event": {
            "event_id": f"evt-{uuid.uuid4().hex[:12]}",
            "event_type": event_type,
            "event_time": int(time.time() * 1000),
            "source": source,
        },
        "conversation": conversation,
        "actor": actor,
        "input": {"text": text},
        "delivery": {"surface": source, "supports_streaming": supports_streaming},
        "resources": {
            "models": resources_of(models, "model_id"),
            "tools": resources_of(tools, "tool_name"),
            "knowledge_bases": resources_of(knowledge_bases, "kb_id"),
            "artifacts": resources_of(artifacts, "artifact_id"),
            "storage": {"areas": storage_areas},
            "state": {"enabled": bool(state_scopes), "scopes": state_scopes},
            "history": {
                "page": apis["history_page"],
                "search": apis["history_search"],
                "event_get": apis["event_get"],
                "event_page": apis["event_page"],
            },
            "platform_capabilities": {
                "actions": list(platform_actions),
                "require_action_approval": require_action_approval,
            }
            if platform_actions
            else {},
        },
        "context": {"conversation_id": conversation_id, "thread_id": thread_id, "available_apis": apis},
        "runtime": {
            "trace_id": f"trace-{uuid.uuid4().hex[:12]}",
            "deadline_at": None if deadline_in is None else time.time() + deadline_in,
        },
        "config": dict(config or {}),
    }
    return AgentRunContext.model_validate(data)


def load_runner(plugin_dir: str | Path, runner_name: str | None = None) -> LoadedRunner:
    """Load the plugin at `plugin_dir` as the host's runtime does and return one of its runners (the only
    one, or `runner_name`). A plugin the runtime would skip raises `AssertionError` with its error."""
    path = Path(plugin_dir).resolve()
    registry = PluginRegistry()
    loaded = load_plugins([path.parent])
    report = next((r for r in loaded.reports if Path(r.path).resolve() == path), None)
    if report is None:
        raise AssertionError(f"{path} is not a plugin directory the runtime discovers")
    if report.status != "loaded":
        raise AssertionError(f"the runtime skips {path}: {report.error}")
    registry.runners = {rid: r for rid, r in loaded.runners.items() if rid in report.runner_ids}
    runners = [r for r in registry.runners.values() if runner_name is None or r.manifest.name == runner_name]
    if len(runners) != 1:
        names = sorted(r.manifest.name for r in registry.runners.values())
        raise AssertionError(f"expected one runner named {runner_name!r} in {path}; found {names}")
    return runners[0]


# --- what a run produced ----------------------------------------------------------------------------


@dataclass
class ProxyCallRecord:
    """One proxy call as the host saw it: the action, its arguments (without the runtime's stamps), and
    `outcome` — "ok" or the error code it was refused with."""

    action: str
    arguments: dict[str, Any]
    outcome: str
    result: Any = None
    error: AgentAPIError | None = None


@dataclass
class RunOutcome:
    """The results of one run, in order, validated and sequenced by the runtime."""

    results: list[AgentRunResult]

    @property
    def status(self) -> str:
        """`completed`, or the `run.failed` code (`runner.exception`, `cancelled`, `runner.timeout`, ...)."""
        last = self.results[-1]
        if last.type == ResultType.RUN_COMPLETED:
            return "completed"
        return str(last.data.get("code"))

    @property
    def failure(self) -> dict[str, Any] | None:
        last = self.results[-1]
        return dict(last.data) if last.type == ResultType.RUN_FAILED else None

    def of_type(self, result_type: str) -> list[AgentRunResult]:
        return [r for r in self.results if r.type == result_type]

    @property
    def types(self) -> list[str]:
        return [str(r.type) for r in self.results]

    @property
    def deltas(self) -> list[str]:
        return [_content_text(r.data.get("chunk")) for r in self.of_type(ResultType.MESSAGE_DELTA)]

    @property
    def text(self) -> str:
        """The reply as a user sees it: the completed messages, or the streamed deltas when none completed."""
        completed = [_content_text(r.data.get("message")) for r in self.of_type(ResultType.MESSAGE_COMPLETED)]
        return "\n".join(completed) if completed else "".join(self.deltas)


def _content_text(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    return Message.model_validate({"role": "assistant", **message}).text()


# --- scripted capabilities --------------------------------------------------------------------------

ModelAnswer = Callable[[dict[str, Any]], Any]


class FakeModels:
    """Scripted model answers per model id, consumed in order; once all are used, the last one repeats."""

    def __init__(self) -> None:
        self._answers: dict[str, list[Any]] = {}
        self._last: dict[str, Any] = {}

    def _add(self, model_id: str, answer: Any) -> None:
        self._answers.setdefault(model_id, []).append(answer)

    def reply(
        self,
        model_id: str,
        content: str | None = "",
        *,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        usage: Mapping[str, Any] | None = None,
        finish_reason: str | None = None,
    ) -> None:
        """Answer the next call of `model_id` with one message (for `invoke`, or as one chunk for `stream`).
        `tool_calls` take `{"id", "name", "arguments"}` (arguments a dict or a JSON string)."""
        calls = [_tool_call(i, call) for i, call in enumerate(tool_calls or ())]
        message = Message(role="assistant", content=content, tool_calls=calls or None)
        reason = finish_reason or ("tool_calls" if calls else "stop")
        self._add(model_id, InvokeLLMResult(message=message, usage=dict(usage or {}) or None, finish_reason=reason))

    def stream(self, model_id: str, chunks: Sequence[str], *, usage: Mapping[str, Any] | None = None) -> None:
        """Answer the next call of `model_id` with these text chunks (an `invoke` gets them joined)."""
        self._add(model_id, list(chunks) + ([dict(usage)] if usage else []))

    def fail(self, model_id: str, code: str, message: str = "scripted failure", **details: Any) -> None:
        """Refuse the next call of `model_id` with this error code (e.g. `rate_limited`, `runtime_error`)."""
        self._add(model_id, AgentAPIException.of(code, message, **details))

    def answer_with(self, model_id: str, answer: ModelAnswer) -> None:
        """Compute the next answer from the request (`{"messages", "tools", ...}`): return a string, an
        `InvokeLLMResult`, a list of chunks, or raise `AgentAPIException`."""
        self._add(model_id, answer)

    def next(self, model_id: str, request: dict[str, Any]) -> Any:
        queue = self._answers.get(model_id)
        if queue:
            answer = self._last[model_id] = queue.pop(0)
        elif model_id in self._last:
            answer = self._last[model_id]
        else:
            raise AgentAPIException.not_found(f"model {model_id!r} has no scripted answer on the fake host")
        if callable(answer) and not isinstance(answer, AgentAPIException):
            answer = answer(request)
        if isinstance(answer, AgentAPIException):
            raise answer
        if isinstance(answer, str):
            return InvokeLLMResult(message=Message(role="assistant", content=answer), finish_reason="stop")
        return answer


def _tool_call(index: int, call: Mapping[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments", {})
    return {
        "id": str(call.get("id") or f"call-{index + 1}"),
        "type": "function",
        "function": {
            "name": call["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


@dataclass
class _FakeTool:
    name: str
    description: str | None
    parameters: dict[str, Any]
    answer: Any


class FakeTools:
    """Tools as a workspace's MCP servers would offer them, with scripted answers."""

    def __init__(self) -> None:
        self.tools: dict[str, _FakeTool] = {}

    def add(
        self,
        name: str,
        answer: Any = "",
        *,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        """`answer`: the result (any JSON), a callable of the arguments returning it, an
        `AgentAPIException` to refuse the call, or `CallToolResult(is_error=True, ...)` for a tool error."""
        self.tools[name] = _FakeTool(name, description, dict(parameters or {"type": "object"}), answer)


class FakePlatform:
    """Platform actions: every request is recorded; executed ones answer `results[action]` (default `{}`)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.results: dict[str, dict[str, Any]] = {}
        self.approval_seconds = 600.0
        """How long a pending request is shown to wait (`expires_at`); the fake never expires one by itself."""

    def find(self, request_id: int) -> dict[str, Any] | None:
        return next((r for r in self.requests if r["request_id"] == request_id), None)

    def decide(self, request_id: int, status: str, *, error: dict[str, Any] | None = None) -> None:
        """Settle a pending request as an operator (or the clock) would on a host: `executed` (answering
        `results[action]`), `rejected` or `expired` (`error` e.g. `{"code": "run_ended"}`); `api.platform.
        get_action` then reports it."""
        found = self.find(request_id)
        if found is None or found["status"] != "pending_approval":
            raise ValueError(f"request {request_id} is not pending")
        found["status"] = status
        found["result"] = self.results.get(found["action"], {}) if status == "executed" else {}
        found["error"] = error if error is not None else {"code": "expired"} if status == "expired" else None


# --- the fake host ----------------------------------------------------------------------------------


class FakeHost:
    """An in-memory host for one conversation: seed it, script it, run a runner, assert on what happened.

    Seed with `add_message`, `add_artifact`, `seed_state`, `seed_storage`; script `models`, `tools`,
    `knowledge` and `platform`; run with `await host.run(runner)` (`steer=[...]` hands more messages to
    the running run); read `host.calls` (every proxy call with its outcome), `host.steered` (each steered
    message and the runtime's answer), `host.state_value(...)`, `host.storage_value(...)` and
    `host.platform.requests`.
    """

    def __init__(
        self,
        ctx: AgentRunContext | None = None,
        *,
        plugin_identity: str = "tester/plugin",
        runner_name: str = "default",
        binding_id: str = "binding-1",
        artifact_upload_max_bytes: int = limits.ARTIFACT_UPLOAD_DEFAULT_MAX_BYTES,
    ) -> None:
        self.ctx = ctx or make_context()
        self.artifact_upload_max_bytes = artifact_upload_max_bytes
        """The workspace's upload limit as the host would read it (0 turns uploads off)."""
        self.plugin_identity = plugin_identity
        self.runner_id = f"plugin:{plugin_identity}/{runner_name}"
        self.binding_id = binding_id
        self.calls: list[ProxyCallRecord] = []
        self.steered: list[tuple[RunInput, RunInputResult]] = []
        """Each `run_input` sent by `run(steer=...)` and the runtime's answer (accepted once the runner took it)."""
        self.models = FakeModels()
        self.tools = FakeTools()
        self.knowledge: dict[str, list[KnowledgeEntry]] = {}
        self.platform = FakePlatform()
        self._ids = itertools.count(1)
        self._transcript: list[TranscriptItem] = []
        self._events: list[AgentEventRecord] = []
        self._artifacts: dict[str, tuple[ArtifactMetadata, bytes]] = {}
        self._uploads: dict[str, tuple[UploadReceiver, bytearray]] = {}
        self._state: dict[tuple[str, str], Any] = {}
        self._storage: dict[tuple[str, str], bytes] = {}

    # -- seeding -----------------------------------------------------------------------------------

    def grant(self, ctx: AgentRunContext | None = None) -> RunGrant:
        """The authorization snapshot the host would freeze for `ctx` (default: the host's context)."""
        return RunGrant.of_context(
            ctx or self.ctx, plugin_identity=self.plugin_identity, runner_id=self.runner_id, binding_id=self.binding_id
        )

    def _event_actor(self) -> ActorContext | None:
        """The run's actor as its events name it: the person the host links it to is the run context's
        (`actor.metadata.person_id`), never stored with the events and transcript."""
        actor = self.ctx.actor
        if actor is None or not ({PERSON_ID_KEY, PERSON_NAME_KEY} & actor.metadata.keys()):
            return actor
        metadata = {k: v for k, v in actor.metadata.items() if k not in (PERSON_ID_KEY, PERSON_NAME_KEY)}
        return actor.model_copy(update={"metadata": metadata})

    def add_message(
        self, role: str, content: str, *, thread_id: str | None = None, event_id: str | None = None
    ) -> TranscriptItem:
        """Append an earlier message of the conversation (and its event, for a user's message)."""
        conversation = self.ctx.conversation
        conversation_id = (conversation.conversation_id if conversation else None) or ""
        item_id = str(next(self._ids))
        if role == "user":
            event_id = event_id or f"evt-seeded-{item_id}"
            self._events.append(
                AgentEventRecord(
                    event_id=event_id,
                    event_type="message.received",
                    source=self.ctx.event.source,
                    time=datetime.now(UTC),
                    cursor=item_id,
                    conversation=conversation,
                    actor=self._event_actor(),
                    input=EventInputSummary(text=content),
                )
            )
        item = TranscriptItem(
            item_id=item_id,
            cursor=item_id,
            conversation_id=conversation_id,
            thread_id=thread_id or (conversation.thread_id if conversation else None),
            role=role,
            content=content,
            event_id=event_id,
            actor=self._event_actor() if role == "user" else None,
            created_at=datetime.now(UTC),
        )
        self._transcript.append(item)
        return item

    def add_artifact(
        self,
        data: bytes,
        *,
        name: str = "file.bin",
        mime_type: str = "application/octet-stream",
        shared: bool = False,
        source: str = "upload",
    ) -> str:
        """Store an artifact of the conversation (or, `shared=True`, of no conversation: readable only when
        the context grants its id in `artifacts`); returns its id."""
        artifact_id = str(uuid.uuid4())
        conversation = self.ctx.conversation
        metadata = ArtifactMetadata(
            artifact_id=artifact_id,
            name=name,
            mime_type=mime_type,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created_at=datetime.now(UTC),
            conversation_id=None if shared or conversation is None else conversation.conversation_id,
            source=source,
        )
        self._artifacts[artifact_id] = (metadata, bytes(data))
        return artifact_id

    def seed_state(self, scope: str, key: str, value: Any) -> None:
        self._state[(self._state_key(scope), key)] = value

    def state_value(self, scope: str, key: str, default: Any = None) -> Any:
        return self._state.get((self._state_key(scope), key), default)

    def seed_storage(self, area: str, key: str, value: bytes) -> None:
        self._storage[(self._storage_owner(area), key)] = bytes(value)

    def storage_value(self, area: str, key: str) -> bytes | None:
        return self._storage.get((self._storage_owner(area), key))

    def _state_key(self, scope: str) -> str:
        key = self.grant().scope.state_key(scope)
        if key is None:
            raise ValueError(f"the context has no {scope} to keep state for")
        return key

    def _storage_owner(self, area: str) -> str:
        grant = self.grant()
        grant.available_apis = grant.available_apis.model_copy(update={"storage": True})
        grant.resources = grant.resources.model_copy(update={"storage": StorageResource(areas=[StorageArea(area)])})
        return storage_owner_key(grant, area)

    def calls_of(self, action: str) -> list[ProxyCallRecord]:
        return [c for c in self.calls if c.action == action]

    # -- running -----------------------------------------------------------------------------------

    def follow_up(self, text: str, **changes: Any) -> AgentRunContext:
        """The context of the next message in the same conversation (a new run id and event)."""
        event = self.ctx.event.model_copy(update={"event_id": f"evt-{uuid.uuid4().hex[:12]}"})
        runtime = self.ctx.runtime
        if runtime.deadline_at is not None:
            runtime = runtime.model_copy(update={"deadline_at": time.time() + 60.0})
        return self.ctx.model_copy(
            update={
                "run_id": str(uuid.uuid4()),
                "event": event,
                "input": self.ctx.input.model_copy(update={"text": text}),
                "runtime": runtime,
                **changes,
            }
        )

    async def run(
        self,
        runner: AgentRunner | LoadedRunner,
        ctx: AgentRunContext | None = None,
        *,
        cancel_after: float | None = None,
        cancel_grace: float = 2.0,
        steer: Sequence[str | Mapping[str, Any] | AgentInput] = (),
    ) -> RunOutcome:
        """Run `runner` for `ctx` (default: the host's context) to its end, as the host would: the current
        input is appended to the transcript first; `cancel_after` seconds cancels the run from the host.

        `steer` are messages that arrive while the run runs, as under a binding's `steer` policy: each is
        added to the transcript and sent with `run_input` once the run is active, the next only after the
        runtime answered the previous (`host.steered`). A bare runner (not loaded from a plugin directory)
        is taken to declare the `steering` capability when `steer` is given; a loaded one declares what its
        manifest says."""
        ctx = self._admitted(ctx or self.ctx)
        if isinstance(runner, LoadedRunner):
            loaded = runner
            self.plugin_identity = loaded.plugin_identity
            self.runner_id = loaded.manifest.id
            ctx = manifest_ceiling(ctx, loaded.manifest)
        else:
            manifest = AgentRunnerManifest(
                id=self.runner_id,
                name=self.runner_id.rsplit("/", 1)[-1],
                label="runner",
                capabilities=AgentRunnerCapabilities(steering=bool(steer)),
            )
            loaded = LoadedRunner(
                manifest=manifest, runner=runner, plugin_identity=self.plugin_identity, plugin_path=""
            )
        registry = PluginRegistry(runners={loaded.manifest.id: loaded})
        service = RuntimeService(registry, cancel_grace=cancel_grace)
        host_end, runtime_end = memory_transport_pair()
        grant = self.grant(ctx)
        run_token = uuid.uuid4().hex
        connection = Connection(host_end, handlers=self._handlers(grant, run_token, ctx), name="fake-host")
        serving = asyncio.create_task(service.serve(runtime_end, name="fake-host"))
        await connection.start()
        results: list[AgentRunResult] = []
        canceller = steerer = None
        run_over = asyncio.Event()
        try:
            request = {
                "runner_id": loaded.manifest.id,
                "runner_name": loaded.manifest.name,
                "context": ctx.model_dump(mode="json"),
                "run_token": run_token,
            }
            if cancel_after is not None:
                canceller = asyncio.create_task(self._cancel_later(connection, ctx.run_id, cancel_after))
            if steer:
                steerer = asyncio.create_task(self._steer(connection, ctx.run_id, steer, run_over))
            async for item in connection.stream(Action.RUN_AGENT.value, request):
                result = AgentRunResult.model_validate(item)
                results.append(result)
                self._persist(result, grant)
            run_over.set()
            if steerer is not None:
                # The runtime's answers to inputs left unread may follow the run's last result.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(steerer), timeout=cancel_grace)
        finally:
            for helper in (canceller, steerer):
                if helper is not None:
                    helper.cancel()
                    await asyncio.gather(helper, return_exceptions=True)
            await connection.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(serving, timeout=cancel_grace + 1)
        return RunOutcome(results)

    @staticmethod
    async def _cancel_later(connection: Connection, run_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        # On a busy machine the run may not have started yet: ask again until the runtime has it to cancel
        # (this task is itself cancelled when the run ends).
        ask_again = AsyncRetrying(
            retry=retry_if_result(lambda answer: not answer.get("cancelled")), wait=wait_fixed(0.01)
        )
        await ask_again(connection.call, Action.CANCEL_RUN.value, {"run_id": run_id, "reason": "cancelled by the test"})

    async def _steer(
        self,
        connection: Connection,
        run_id: str,
        messages: Sequence[str | Mapping[str, Any] | AgentInput],
        run_over: asyncio.Event,
    ) -> None:
        for message in messages:
            if isinstance(message, str):
                given = AgentInput(text=message)
            else:
                given = message if isinstance(message, AgentInput) else AgentInput.model_validate(message)
            event_id = f"evt-{uuid.uuid4().hex[:12]}"
            self.add_message("user", given.text or "", event_id=event_id)
            item = RunInput(run_id=run_id, event_id=event_id, input=given)
            # The run may not be active in the runtime yet: ask again until it is, or has ended.
            ask_again = AsyncRetrying(
                retry=retry_if_result(lambda answer: answer.get("reason") == "not_active" and not run_over.is_set()),
                wait=wait_fixed(0.01),
            )
            payload = item.model_dump(mode="json")
            answer: dict[str, Any] = await ask_again(connection.call, Action.RUN_INPUT.value, payload)
            self.steered.append((item, RunInputResult.model_validate(answer)))

    def _admitted(self, ctx: AgentRunContext) -> AgentRunContext:
        """Append the current input to the transcript and point the context's handles at it."""
        if ctx.conversation is None or not ctx.conversation.conversation_id:
            return ctx
        latest = self._transcript[-1].cursor if self._transcript else None
        current = self.add_message("user", ctx.input.text or "", event_id=ctx.event.event_id)
        context = ctx.context.model_copy(
            update={
                "latest_cursor": latest,
                "transcript_seq": int(current.cursor),
                "has_history_before": latest is not None,
            }
        )
        return ctx.model_copy(update={"context": context})

    def _persist(self, result: AgentRunResult, grant: RunGrant) -> None:
        """What the host keeps of a result: state updates, created artifacts and the assistant's reply."""
        data = result.data
        if result.type == ResultType.STATE_UPDATED:
            with contextlib.suppress(AgentAPIException):
                self._state[(state_scope_key(grant, str(data["scope"])), str(data["key"]))] = data.get("value")
        elif result.type == ResultType.ARTIFACT_CREATED and data.get("content_base64"):
            content = base64.b64decode(str(data["content_base64"]))
            name, mime_type = str(data.get("name") or "artifact"), str(data.get("mime_type") or "")
            artifact_id = self.add_artifact(content, name=name, mime_type=mime_type, source="runner")
            metadata, blob = self._artifacts[artifact_id]
            self._artifacts[artifact_id] = (metadata.model_copy(update={"run_id": grant.run_id}), blob)
        elif result.type == ResultType.ACTION_REQUESTED:
            self._platform_request(grant, str(data.get("action")), data.get("target") or {}, data.get("payload") or {})
        elif result.type == ResultType.MESSAGE_COMPLETED:
            self.add_message("assistant", _content_text(data.get("message")))

    # -- the proxy ---------------------------------------------------------------------------------

    async def proxy_call(self, action: str, data: Mapping[str, Any], ctx: AgentRunContext | None = None) -> Any:
        """Send one raw wire call for the run of `ctx` (default: the host's context) as the runtime would,
        without the SDK proxy's own checks: the answer (a list of frames for a stream), or the
        `AgentAPIException` the host refuses it with."""
        ctx = ctx or self.ctx
        grant = self.grant(ctx)
        stamp = {"run_id": ctx.run_id, "caller_plugin_identity": grant.plugin_identity, "run_token": "direct"}
        return await self._answer(Action(action), {**data, **stamp}, grant, "direct", ctx.runtime.deadline_at)

    def _handlers(self, grant: RunGrant, run_token: str, ctx: AgentRunContext) -> dict[str, Handler]:
        def make(action: Action) -> Handler:
            async def handle(data: dict[str, Any], info: CallInfo) -> dict[str, Any]:
                answer = await self._answer(action, data, grant, run_token, ctx.runtime.deadline_at)
                return _replay(answer) if isinstance(answer, list) else answer  # type: ignore[return-value]

            return handle

        return {action.value: make(action) for action in PROXY_REQUEST_MODELS}

    async def _answer(
        self, action: Action, data: dict[str, Any], grant: RunGrant, run_token: str, deadline_at: float | None
    ) -> dict[str, Any] | list[dict[str, Any]]:
        """Serve one call (a list of frames for a stream) and record it, allowed or refused."""
        arguments = {k: v for k, v in data.items() if k not in _STAMP_FIELDS}
        record = ProxyCallRecord(action=action.value, arguments=arguments, outcome="ok")
        self.calls.append(record)
        try:
            # The same order as the host's dispatcher: the run's session, the caller, the request, the
            # deadline, then the family's own checks.
            if data.get("run_token") != run_token or data.get("run_id") != grant.run_id:
                raise AgentAPIException.unauthorized(f"run {data.get('run_id')!r} is not active for this caller")
            if data.get("caller_plugin_identity") != grant.plugin_identity:
                raise AgentAPIException.unauthorized("the calling plugin does not provide this run's runner")
            request = request_parse(action, data)
            deadline_check(deadline_at, time.time())
            answer = await self._serve(action, request, grant)
        except AgentAPIException as exc:
            record.outcome, record.error = exc.code, exc.error
            raise
        record.result = answer
        return answer

    async def _serve(self, action: Action, request: Any, grant: RunGrant) -> dict[str, Any] | list[dict[str, Any]]:
        match action:
            case Action.INVOKE_LLM | Action.INVOKE_LLM_STREAM | Action.INVOKE_RERANK | Action.COUNT_TOKENS:
                model_authorize(grant, action, request.model_id)
                return self._model(action, request, grant)
            case Action.GET_TOOL_DETAIL | Action.CALL_TOOL:
                tool_authorize(grant, action, request.tool_name)
                return await self._tool(action, request)
            case Action.RETRIEVE_KNOWLEDGE_BASE:
                knowledge_authorize(grant, request.kb_id)
                entries = self.knowledge.get(request.kb_id, [])[: request.top_k]
                return RetrieveKnowledgeBaseResult(entries=entries).model_dump(mode="json")
            case Action.HISTORY_PAGE:
                return self._history_page(grant, request)
            case Action.HISTORY_SEARCH:
                return self._history_search(grant, request)
            case Action.EVENT_GET:
                api_require(grant.available_apis.event_get, "events.get")
                own_conversation(grant, None)
                found = next((e for e in self._events if e.event_id == request.event_id), None)
                if found is None:
                    raise AgentAPIException.not_found(
                        f"no event {request.event_id!r} in this run's scope", event_id=request.event_id
                    )
                return found.model_dump(mode="json")
            case Action.EVENT_PAGE:
                return self._event_page(grant, request)
            case Action.ARTIFACT_METADATA | Action.ARTIFACT_READ | Action.ARTIFACT_STREAM:
                return self._artifact(action, grant, request)
            case (
                Action.ARTIFACT_UPLOAD_OPEN
                | Action.ARTIFACT_UPLOAD_CHUNK
                | Action.ARTIFACT_UPLOAD_FINISH
                | Action.ARTIFACT_UPLOAD_ABORT
            ):
                return self._upload(action, grant, request)
            case Action.STATE_GET | Action.STATE_SET | Action.STATE_DELETE | Action.STATE_LIST:
                return self._state_call(action, grant, request)
            case Action.STORAGE_GET | Action.STORAGE_SET | Action.STORAGE_DELETE | Action.STORAGE_LIST:
                return self._storage_call(action, grant, request)
            case Action.PLATFORM_REQUEST_ACTION if request.action == PLATFORM_ACTION_GET:
                return self._platform_lookup(request.target)
            case Action.PLATFORM_REQUEST_ACTION:
                return self._platform_request(grant, request.action, request.target, request.payload)
        raise AgentAPIException.runtime_error(f"the fake host does not serve {action.value}")

    def _model(self, action: Action, request: Any, grant: RunGrant) -> dict[str, Any] | list[dict[str, Any]]:
        if action is Action.COUNT_TOKENS:
            text = request.text or " ".join(Message.model_validate(m).text() for m in request.messages)
            return CountTokensResult(tokens=max(1, len(text) // 4), estimated=True).model_dump(mode="json")
        resource = grant.resources.find_model(request.model_id)
        kind = resource.kind if resource is not None else "llm"
        model_kind_check(request.model_id, kind, "rerank" if action is Action.INVOKE_RERANK else "llm")
        body = request.model_dump(mode="json", exclude={"run_id", "caller_plugin_identity", "run_token"})
        answer = self.models.next(request.model_id, body)
        if action is Action.INVOKE_RERANK:
            if isinstance(answer, RerankResult):
                return answer.model_dump(mode="json")
            items = [RerankItem(index=i, score=1.0 / (i + 1), document=d) for i, d in enumerate(request.documents)]
            return RerankResult(results=items[: request.top_k]).model_dump(mode="json")
        if isinstance(answer, list):
            chunks = [c for c in answer if isinstance(c, str)]
            usage = next((c for c in answer if isinstance(c, dict)), None)
            if action is Action.INVOKE_LLM:
                return _llm_answer(Message(role="assistant", content="".join(chunks)), usage, "stop")
            frames = [_llm_frame(Message(role="assistant", content=c), None, None) for c in chunks]
            if frames:
                frames[-1].update(finish_reason="stop", usage=usage)
            return frames
        result = InvokeLLMResult.model_validate(answer)
        if action is Action.INVOKE_LLM:
            return _llm_answer(result.message, result.usage, result.finish_reason)
        return [_llm_frame(result.message, result.usage, result.finish_reason)]

    async def _tool(self, action: Action, request: Any) -> dict[str, Any]:
        tool = self.tools.tools.get(request.tool_name)
        if tool is None:
            raise AgentAPIException.not_found(
                f"tool {request.tool_name!r} is not configured on this host", tool_name=request.tool_name
            )
        if action is Action.GET_TOOL_DETAIL:
            return ToolDetail(tool_name=tool.name, description=tool.description, parameters=tool.parameters).model_dump(
                mode="json"
            )
        tool_arguments_check(tool.name, tool.parameters, request.parameters)
        answer = tool.answer
        if callable(answer) and not isinstance(answer, AgentAPIException):
            answer = answer(request.parameters)
            if asyncio.iscoroutine(answer):
                answer = await answer
        if isinstance(answer, AgentAPIException):
            raise answer
        if isinstance(answer, CallToolResult):
            return answer.model_dump(mode="json")
        return CallToolResult(result=answer).model_dump(mode="json")

    def _visible_items(self, grant: RunGrant, conversation_id: str, thread_id: str | None) -> list[TranscriptItem]:
        return [
            i
            for i in self._transcript
            if i.conversation_id == conversation_id and (thread_id is None or i.thread_id == thread_id)
        ]

    def _history_page(self, grant: RunGrant, request: Any) -> dict[str, Any]:
        api_require(grant.available_apis.history_page, "history.page")
        conversation_id = own_conversation(grant, request.conversation_id)
        thread_id = own_thread(grant, request.thread_id)
        before = cursor_value(request.before_cursor, name="before_cursor")
        after = cursor_value(request.after_cursor, name="after_cursor")
        items = self._visible_items(grant, conversation_id, thread_id)
        page, has_more = _window(items, before, after, forward=request.direction == "forward", limit=request.limit)
        next_cursor, prev_cursor = page_cursors(
            [i.cursor for i in page], has_more=has_more, forward=request.direction == "forward"
        )
        if not request.include_artifacts:
            page = [i.model_copy(update={"artifacts": []}) for i in page]
        return HistoryPage(items=page, next_cursor=next_cursor, prev_cursor=prev_cursor, has_more=has_more).model_dump(
            mode="json"
        )

    def _history_search(self, grant: RunGrant, request: Any) -> dict[str, Any]:
        api_require(grant.available_apis.history_search, "history.search")
        filters = request.filters
        conversation_id = own_conversation(grant, filters.conversation_id if filters else None)
        thread_id = own_thread(grant, filters.thread_id if filters else None)
        words = request.query.lower().split()
        hits = []
        for item in reversed(self._visible_items(grant, conversation_id, thread_id)):
            if filters and filters.roles and item.role not in filters.roles:
                continue
            text = (item.content or "").lower()
            score = sum(text.count(w) for w in words)
            if score:
                hits.append(HistorySearchHit(item=item, score=float(score), snippet=item.content))
        hits.sort(key=lambda h: -(h.score or 0))
        return HistorySearchResult(items=hits[: request.top_k], query=request.query).model_dump(mode="json")

    def _event_page(self, grant: RunGrant, request: Any) -> dict[str, Any]:
        api_require(grant.available_apis.event_page, "events.page")
        own_conversation(grant, request.conversation_id)
        before = cursor_value(request.before_cursor, name="before_cursor")
        after = cursor_value(request.after_cursor, name="after_cursor")
        events = [e for e in self._events if not request.event_types or e.event_type in request.event_types]
        forward = after is not None and before is None
        page, has_more = _window(events, before, after, forward=forward, limit=request.limit)
        next_cursor, prev_cursor = page_cursors([e.cursor for e in page], has_more=has_more, forward=forward)
        return EventPage(items=page, next_cursor=next_cursor, prev_cursor=prev_cursor, has_more=has_more).model_dump(
            mode="json"
        )

    def _artifact(self, action: Action, grant: RunGrant, request: Any) -> dict[str, Any] | list[dict[str, Any]]:
        operation = "metadata" if action is Action.ARTIFACT_METADATA else "read"
        granted = artifact_access(grant, request.artifact_id, operation=operation)
        found = self._artifacts.get(request.artifact_id)
        visible = found is not None and (
            request.artifact_id in granted
            or found[0].run_id == grant.run_id
            or (bool(grant.scope.conversation_id) and found[0].conversation_id == grant.scope.conversation_id)
        )
        if found is None or not visible:
            raise AgentAPIException.not_found(
                f"no artifact {request.artifact_id!r} in this run's scope", artifact_id=request.artifact_id
            )
        metadata, data = found
        if action is Action.ARTIFACT_METADATA:
            return metadata.model_dump(mode="json")
        if action is Action.ARTIFACT_READ:
            piece = data[request.offset : request.offset + request.length]
            return ArtifactReadResult(
                artifact_id=metadata.artifact_id,
                offset=request.offset,
                length=len(piece),
                data_base64=base64.b64encode(piece).decode("ascii"),
                eof=request.offset + len(piece) >= len(data),
                total_size=len(data),
            ).model_dump(mode="json")
        if request.offset >= len(data):
            return [ArtifactStreamChunk(artifact_id=metadata.artifact_id, offset=len(data), data_base64="", eof=True)
                    .model_dump(mode="json")]  # fmt: skip
        chunks = []
        for start in range(request.offset, len(data), request.chunk_size):
            piece = data[start : start + request.chunk_size]
            chunks.append(
                ArtifactStreamChunk(
                    artifact_id=metadata.artifact_id,
                    offset=start,
                    data_base64=base64.b64encode(piece).decode("ascii"),
                    eof=start + len(piece) >= len(data),
                ).model_dump(mode="json")
            )
        return chunks

    def _upload(self, action: Action, grant: RunGrant, request: Any) -> dict[str, Any]:
        """Uploads held in memory, under the host's rules (`langbot_sdk.uploads`). Unlike the host, the fake
        keeps the declared MIME type as it is instead of sniffing the content."""
        if action is Action.ARTIFACT_UPLOAD_OPEN:
            # Only an open needs the grant, as on the host: any other call names an upload this run opened.
            api_require(grant.available_apis.artifact_upload, "artifacts.upload")
            open_uploads = sum(1 for receiver, _ in self._uploads.values() if receiver.run_id == grant.run_id)
            max_bytes = self.artifact_upload_max_bytes
            upload_open_check(max_bytes=max_bytes, declared_size=request.size, open_uploads=open_uploads)
            upload_id = uuid.uuid4().hex
            receiver = UploadReceiver(
                upload_id=upload_id, run_id=grant.run_id, name=request.name, mime_type=request.mime_type,
                max_bytes=max_bytes,
            )  # fmt: skip
            self._uploads[upload_id] = (receiver, bytearray())
            return ArtifactUploadOpened(
                upload_id=upload_id, max_bytes=max_bytes, chunk_max_bytes=limits.ARTIFACT_UPLOAD_CHUNK_MAX_BYTES
            ).model_dump(mode="json")
        held = self._uploads.get(request.upload_id)
        if held is None or held[0].run_id != grant.run_id:
            raise AgentAPIException.not_found(
                f"no upload {request.upload_id!r} open for this run", upload_id=request.upload_id
            )
        receiver, content = held
        if action is Action.ARTIFACT_UPLOAD_CHUNK:
            data = base64.b64decode(request.data_base64)
            try:
                receiver.accept(request.offset, data)
            except AgentAPIException as exc:
                if exc.code == ErrorCode.PAYLOAD_TOO_LARGE:
                    del self._uploads[request.upload_id]
                raise
            content += data
            return ArtifactUploadProgress(upload_id=request.upload_id, received=receiver.received).model_dump(
                mode="json"
            )
        del self._uploads[request.upload_id]
        if action is Action.ARTIFACT_UPLOAD_ABORT:
            return ArtifactUploadProgress(
                upload_id=request.upload_id, received=receiver.received, aborted=True
            ).model_dump(mode="json")
        receiver.finish_check(size=request.size, sha256=request.sha256)
        artifact_id = str(uuid.uuid4())
        metadata = ArtifactMetadata(
            artifact_id=artifact_id,
            name=receiver.name,
            mime_type=receiver.mime_type,
            size=receiver.received,
            sha256=receiver.sha256,
            created_at=datetime.now(UTC),
            conversation_id=grant.scope.conversation_id or None,
            run_id=grant.run_id,
            source="runner",
        )
        self._artifacts[artifact_id] = (metadata, bytes(content))
        return metadata.model_dump(mode="json")

    def artifact_content(self, artifact_id: str) -> bytes:
        """The bytes of an artifact the host holds (seeded, created inline or uploaded by a run)."""
        return self._artifacts[artifact_id][1]

    def _state_call(self, action: Action, grant: RunGrant, request: Any) -> dict[str, Any]:
        scope_key = state_scope_key(grant, request.scope)
        if action is Action.STATE_GET:
            key = (scope_key, request.key)
            return StateGetResult(found=key in self._state, value=self._state.get(key)).model_dump(mode="json")
        if action is Action.STATE_SET:
            self._state[(scope_key, request.key)] = request.value
            return StateSetResult().model_dump(mode="json")
        if action is Action.STATE_DELETE:
            deleted = self._state.pop((scope_key, request.key), _MISSING) is not _MISSING
            return StateDeleteResult(deleted=deleted).model_dump(mode="json")
        keys, has_more = _keys_page(
            [k for (owner, k) in self._state if owner == scope_key], request.prefix, request.limit
        )
        return StateListResult(keys=keys, has_more=has_more).model_dump(mode="json")

    def _storage_call(self, action: Action, grant: RunGrant, request: Any) -> dict[str, Any]:
        owner = storage_owner_key(grant, request.area)
        if action is Action.STORAGE_GET:
            value = self._storage.get((owner, request.key))
            if value is None:
                return StorageGetResult(found=False).model_dump(mode="json")
            encoded = base64.b64encode(value).decode("ascii")
            return StorageGetResult(found=True, value_base64=encoded).model_dump(mode="json")
        if action is Action.STORAGE_SET:
            value = base64.b64decode(request.value_base64)
            self._storage[(owner, request.key)] = value
            return StorageSetResult(size=len(value)).model_dump(mode="json")
        if action is Action.STORAGE_DELETE:
            deleted = self._storage.pop((owner, request.key), None) is not None
            return StorageDeleteResult(deleted=deleted).model_dump(mode="json")
        keys, has_more = _keys_page([k for (o, k) in self._storage if o == owner], request.prefix, request.limit)
        return StorageListResult(keys=keys, has_more=has_more).model_dump(mode="json")

    def _platform_request(
        self, grant: RunGrant, action: str, target: dict[str, Any], payload: dict[str, Any]
    ) -> dict[str, Any]:
        payload, may_outlive_run = platform_action_outlive_split(payload)
        decision = platform_action_decision(capabilities=grant.resources.platform_capabilities, action=action)
        status = "refused" if not decision.allowed else "pending_approval" if decision.needs_approval else "executed"
        request_id = len(self.platform.requests) + 1
        result = self.platform.results.get(action, {}) if status == "executed" else {}
        self.platform.requests.append(
            {
                "request_id": request_id,
                "action": action,
                "target": target,
                "payload": payload,
                "status": status,
                "may_outlive_run": may_outlive_run,
                "result": result,
                "error": None,
                "expires_at": datetime.now(UTC) + timedelta(seconds=self.platform.approval_seconds)
                if status == "pending_approval"
                else None,
            }
        )
        details = {"request_id": request_id, "status": status, "action": action}
        if status == "refused":
            raise AgentAPIException.unauthorized(
                f"platform action {action!r} is not authorized for this run", **details
            )
        if status == "pending_approval":
            raise AgentAPIException.unauthorized(
                f"platform action {action!r} needs an operator's approval; it was recorded for review", **details
            )
        result = self.platform.results.get(action, {})
        return PlatformActionResult(accepted=True, result=result).model_dump(mode="json")

    def _platform_lookup(self, target: dict[str, Any]) -> dict[str, Any]:
        request_id = platform_action_lookup_id(target)
        found = self.platform.find(request_id)
        if found is None:
            raise AgentAPIException.not_found(
                f"no platform action request {request_id} of this runner in this conversation", request_id=request_id
            )
        status = PlatformActionStatus.model_validate({k: v for k, v in found.items() if k not in {"target", "payload"}})
        return platform_action_status_answer(status)


_MISSING = object()


def manifest_ceiling(ctx: AgentRunContext, manifest: AgentRunnerManifest) -> AgentRunContext:
    """`ctx` with no more than the runner's manifest asks for, as a host grants it: resources are the
    manifest's permissions ∩ the binding's policy, so a model, tool, area or API the test grants but the
    manifest does not request is not granted on a host either (docs/security.md, "Runner code")."""
    permissions, policy = manifest.permissions, manifest.context
    resources = ctx.resources
    areas = [area for area in resources.storage.areas if area.value in permissions.storage]
    history = resources.history.model_copy(
        update={
            "page": resources.history.page and "page" in permissions.history and policy.supports_history_pull,
            "search": resources.history.search and "search" in permissions.history and policy.supports_history_search,
            "event_get": resources.history.event_get and "get" in permissions.events,
            "event_page": resources.history.event_page and "page" in permissions.events,
        }
    )
    platform = dict(resources.platform_capabilities)
    actions = [a for a in platform.get("actions") or [] if a in permissions.platform_api]
    narrowed = resources.model_copy(
        update={
            "models": [m.model_copy(update={"operations": list(permissions.models)}) for m in resources.models]
            if permissions.models
            else [],
            "tools": [t.model_copy(update={"operations": list(permissions.tools)}) for t in resources.tools]
            if permissions.tools
            else [],
            "knowledge_bases": [
                kb.model_copy(update={"operations": list(permissions.knowledge_bases)})
                for kb in resources.knowledge_bases
            ]
            if permissions.knowledge_bases
            else [],
            "storage": StorageResource(areas=areas),
            "history": history,
            "platform_capabilities": {**platform, "actions": actions} if actions else {},
        }
    )
    apis = ctx.context.available_apis
    artifact_pull = policy.supports_artifact_pull
    narrowed_apis = apis.model_copy(
        update={
            "history_page": apis.history_page and history.page,
            "history_search": apis.history_search and history.search,
            "event_get": apis.event_get and history.event_get,
            "event_page": apis.event_page and history.event_page,
            "artifact_metadata": apis.artifact_metadata and "metadata" in permissions.artifacts and artifact_pull,
            "artifact_read": apis.artifact_read and "read" in permissions.artifacts and artifact_pull,
            "storage": apis.storage and bool(areas),
        }
    )
    context = ctx.context.model_copy(update={"available_apis": narrowed_apis})
    return ctx.model_copy(update={"resources": narrowed, "context": context})


# Shaped as the host's model handlers shape them: messages without their unset fields.
def _llm_answer(message: Message, usage: dict[str, Any] | None, finish_reason: str | None) -> dict[str, Any]:
    return {
        "message": message.model_dump(mode="json", exclude_none=True),
        "usage": usage,
        "finish_reason": finish_reason,
    }


def _llm_frame(delta: Message, usage: dict[str, Any] | None, finish_reason: str | None) -> dict[str, Any]:
    return {"delta": delta.model_dump(mode="json", exclude_none=True), "usage": usage, "finish_reason": finish_reason}


def _window(
    items: Sequence[Any], before: int | None, after: int | None, *, forward: bool, limit: int
) -> tuple[list[Any], bool]:
    """Items (with integer cursors, oldest first) between the cursors: the `limit` nearest to the starting
    side, oldest first, and whether more exist beyond them in the walking direction."""
    inside = [
        i for i in items if (before is None or int(i.cursor) < before) and (after is None or int(i.cursor) > after)
    ]
    if forward:
        return inside[:limit], len(inside) > limit
    return inside[-limit:] if limit else [], len(inside) > limit


def _keys_page(keys: Iterable[str], prefix: str | None, limit: int) -> tuple[list[str], bool]:
    matching = sorted(k for k in keys if prefix is None or k.startswith(prefix))
    return matching[:limit], len(matching) > limit


async def _replay(items: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for item in items:
        yield item
