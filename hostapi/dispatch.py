"""The checks every proxy call goes through, and the registry of family handlers (docs/security.md, "Runner code").

Order, for every runtime → host action:
1. the call carries the run token of a run session active on this worker, and its `run_id` is that
   token's run (`unauthorized` otherwise — also for a finished run's token, a forged token, or a run
   naming another run's id). The runtime stamps the token from the run whose task made the call, so
   knowing another run's id is not enough to act for it; a refusal is audited under the token's run
   (or under no run when the token is unknown), never under the run the call named;
2. the caller plugin identity stamped by the runtime is the run's plugin (`unauthorized`);
3. the request holds only text the database can store (`invalid_argument`, naming the field), and parses
   against its strict protocol model (`invalid_argument`, or `payload_too_large`
   for an over-cap value; there is nothing to authorize in a request that does not parse). Counts
   above their cap are **clamped, not refused**, exactly as the SDK clamps them: `limit` of
   `history_page`/`event_page` to 100, `top_k` of `history_search` to 50, `limit` of `state_list` to
   100 and of `storage_list` to 1000, `length`/`chunk_size` of artifact reads to 10 MiB;
4. the per-run rate limit (`rate_limited`, retryable) and the run's deadline (`deadline_exceeded`);
5. the family handler: API allowed by the frozen snapshot → resource in the snapshot (`unauthorized`)
   → object within the run's scope (`not_found`, also for objects of other conversations or
   workspaces) → value caps; its work is bounded by the time left before the deadline.
An unexpected failure answers `runtime_error`. Every call, allowed or refused, leaves one audit row.

A call still in progress when its run ends here (cancelled, failed, past its lease) is cut within
`RUN_END_POLL_SECONDS`: the runtime cannot tell the host it stopped reading a stream (a wire stream has no
cancel frame), so without this a provider's stream or a slow call went on until the provider ended it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from django.conf import settings

from foundation.log_context import log_context_set
from foundation.sql import DatabaseExecutor
from foundation.storable import UNSTORABLE_MESSAGE, storable_text, unstorable_text_path
from foundation.tracing import proxy_span_end, proxy_span_start, span_current
from hostapi import artifacts, events, history, platform, providers, state, storage
from hostapi.base import FamilyHandler, ProxyCall, RateLimiter
from langbot_sdk.authorization import request_parse
from langbot_sdk.protocol import PROXY_REQUEST_MODELS, Action, AgentAPIException, ErrorCode
from langbot_sdk.wire import CallInfo, Handler
from runners.access.audit import AuditLog
from runners.access.proxy import SessionLookup
from runners.access.session import RunSession

logger = logging.getLogger(__name__)

FAMILIES: dict[Action, FamilyHandler] = {
    **providers.HANDLERS,
    **history.HANDLERS,
    **events.HANDLERS,
    **artifacts.HANDLERS,
    **state.HANDLERS,
    **storage.HANDLERS,
    **platform.HANDLERS,
}

RUN_END_POLL_SECONDS = 0.2
"""How often a call in progress checks that its run is still active on this worker (a dictionary lookup)."""

# The calls that wait on something outside the host (a model provider, an MCP server, an embedding model)
# are cut when their run ends; the others are bounded database work, and a platform action waiting for an
# operator may be meant to outlive its run.
_CUT_AT_RUN_END = frozenset(providers.HANDLERS)

_RESOURCE_FIELDS = (
    "model_id", "tool_name", "kb_id", "artifact_id", "upload_id", "area", "scope", "event_id", "action",
)  # fmt: skip


def resource_of(request: Any) -> str:
    for name in _RESOURCE_FIELDS:
        value = getattr(request, name, None)
        if value is not None:
            key = getattr(request, "key", None)
            return f"{name}={value}" + (f" key={key}" if isinstance(key, str) else "")
    # A history read names the conversation it reads (another one needs the binding's grant), so the audit
    # shows which conversation each read reached or was refused.
    filters = getattr(request, "filters", None)
    conversation_id = getattr(request, "conversation_id", None) or getattr(filters, "conversation_id", None)
    return f"conversation_id={conversation_id}" if isinstance(conversation_id, str) else ""


def _scope_of(session: RunSession | None) -> str:
    if session is None:
        return ""
    scope = session.scope
    return f"{scope.conversation_id}#{scope.thread_id}" if scope.thread_id else scope.conversation_id


def proxy_handlers(
    *,
    sessions: SessionLookup,
    db: DatabaseExecutor,
    audit: AuditLog | None = None,
    rate_limiter: RateLimiter | None = None,
) -> dict[str, Handler]:
    """One handler per runtime → host action, bound to this worker's run sessions."""
    audit_log = audit or AuditLog(db)
    limiter = rate_limiter or RateLimiter(
        rate=settings.LANGBOT_PROXY_RATE_PER_RUN, burst=settings.LANGBOT_PROXY_BURST_PER_RUN
    )

    def make(action: Action) -> Handler:
        family = FAMILIES[action]

        async def handle(data: dict[str, Any], info: CallInfo | None) -> Any:
            started = time.perf_counter()
            # Audit rows are written in batches: one value the database cannot store would fail them all.
            named_run = storable_text(str(data.get("run_id") or ""))
            session: RunSession | None = None
            resource = ""
            traced: Any = None  # the call's span, ended with its audit row (a stream's at its end)

            def record(outcome: str) -> None:
                proxy_span_end(traced, outcome)
                audit_log.record(
                    run_id=session.run_id if session else "",
                    runner_id=session.scope.runner_id if session else "",
                    workspace_id=session.scope.workspace_id if session else None,
                    action=action.value,
                    resource=resource,
                    scope=_scope_of(session),
                    caller=storable_text(str(data.get("caller_plugin_identity") or "")),
                    outcome=outcome,
                    duration_ms=(time.perf_counter() - started) * 1000,
                )

            try:
                token = data.get("run_token")
                held = sessions(token) if isinstance(token, str) and token else None
                if held is None:
                    resource = f"run_id={named_run}"
                    raise AgentAPIException.unauthorized(f"run {named_run!r} is not active for this caller")
                session, deadline_at = held
                if named_run != session.run_id:
                    resource = f"run_id={named_run}"
                    raise AgentAPIException.unauthorized(f"run {named_run!r} is not active for this caller")
                if data.get("caller_plugin_identity") != session.plugin_identity:
                    raise AgentAPIException.unauthorized("the calling plugin does not provide this run's runner")
                # Each served call is its own task: what it logs from here on names its run.
                log_context_set(run_id=session.run_id, workspace=session.scope.workspace)
                unstorable = unstorable_text_path(data)
                if unstorable is not None:
                    raise AgentAPIException.invalid_argument(
                        f"{unstorable or 'the request'}: {UNSTORABLE_MESSAGE}", field=unstorable
                    )
                request = request_parse(action, data)
                resource = resource_of(request)
                limiter.take(session.run_id)
                remaining = deadline_at - time.time()
                if remaining <= 0:
                    raise AgentAPIException.deadline_exceeded("the run's deadline has passed")
                call = ProxyCall(action=action, request=request, session=session, deadline_at=deadline_at, db=db)
                active = _run_active(sessions, token)
                watch = RunEndWatch(active if action in _CUT_AT_RUN_END else None)
                traced = proxy_span_start(session.run_id, action.value, **{"langbot.proxy.resource": resource})
                try:
                    async with asyncio.timeout(remaining):
                        with span_current(traced):
                            result = await family(call)
                except TimeoutError:
                    raise AgentAPIException.deadline_exceeded(
                        f"{action.value} did not finish before the run's deadline"
                    ) from None
                except asyncio.CancelledError:
                    if not watch.taken_back():
                        raise
                    raise _ended(session.run_id, action) from None
                finally:
                    watch.stop()
            except AgentAPIException as exc:
                record(exc.code)
                raise
            except Exception as exc:
                logger.exception("proxy call %s of run %s failed", action.value, named_run)
                record(ErrorCode.RUNTIME_ERROR.value)
                raise AgentAPIException.runtime_error(
                    f"the host failed to serve {action.value}", exception=type(exc).__name__
                ) from None
            if isinstance(result, dict):
                record("ok")
                return result
            return _audited_stream(result, call, record, active)

        return handle

    return {action.value: make(action) for action in PROXY_REQUEST_MODELS}


def _run_active(sessions: SessionLookup, token: Any) -> Callable[[], bool]:
    return lambda: sessions(token) is not None


def _ended(run_id: str, action: Action) -> AgentAPIException:
    # What any later call of the run gets (step 1); the runtime has stopped waiting for it anyway.
    return AgentAPIException.unauthorized(f"run {run_id!r} ended while its {action.value} call was in progress")


class RunEndWatch:
    """Cancels the task that started it once `active()` turns false, checked every `RUN_END_POLL_SECONDS`
    (no `active`: watches nothing). `stop()` when the watched work is over; after a CancelledError,
    `taken_back()` says whether it was the watch's (and withdraws it, so the task can answer instead of
    ending cancelled)."""

    def __init__(self, active: Callable[[], bool] | None) -> None:
        self._task = asyncio.current_task()
        self.fired = False
        self._watcher: asyncio.Task[None] | None = None
        if active is not None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch(active))

    async def _watch(self, active: Callable[[], bool]) -> None:
        while True:
            await asyncio.sleep(RUN_END_POLL_SECONDS)
            if not active():
                self.fired = True
                if self._task is not None:
                    self._task.cancel()
                return

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None

    def taken_back(self) -> bool:
        if not self.fired or self._task is None:
            return False
        self.fired = False
        # Another cancel (the connection closing) still stands: then the task ends cancelled after all.
        return self._task.uncancel() == 0


async def _audited_stream(
    items: AsyncIterator[dict[str, Any]], call: ProxyCall, record: Callable[[str], None], active: Callable[[], bool]
) -> AsyncIterator[dict[str, Any]]:
    """Forward a streamed answer; the whole stream is bounded by the deadline and by its run staying active
    (the watch lives in the task that reads the stream), and audited once."""
    outcome = "ok"
    watch: RunEndWatch | None = None
    try:
        watch = RunEndWatch(active)
        while True:
            remaining = call.remaining()
            if remaining <= 0:
                raise AgentAPIException.deadline_exceeded("the run's deadline has passed during the stream")
            try:
                async with asyncio.timeout(remaining):
                    item = await anext(items)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise AgentAPIException.deadline_exceeded("the run's deadline has passed during the stream") from None
            except asyncio.CancelledError:
                if not watch.taken_back():
                    raise
                raise _ended(call.session.run_id, call.action) from None
            yield item
    except AgentAPIException as exc:
        outcome = exc.code
        raise
    except GeneratorExit:
        outcome = "closed"
        raise
    except BaseException:
        outcome = ErrorCode.RUNTIME_ERROR.value
        raise
    finally:
        if watch is not None:
            watch.stop()
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await _quietly(aclose())
        record(outcome)


async def _quietly(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:
        logger.debug("closing a proxy stream failed", exc_info=True)
