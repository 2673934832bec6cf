"""OpenTelemetry traces of a run, from the inbound message to the tool call (docs/tracing.md).

What belongs here: turning tracing on from the standard `OTEL_*` variables, and the few helpers the hot path
calls at each traced site (a context manager or a start/end pair), so that the sites stay one line each and
cost next to nothing while tracing is off — every helper first checks one module flag.

Off by default. `tracing_configure` installs a `TracerProvider` exporting over OTLP/HTTP only when export is
configured: `OTEL_TRACES_EXPORTER` names `otlp`, or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_TRACES_EXPORTER` is not `none`; `OTEL_SDK_DISABLED=true`
keeps it off whatever else is set. The exporter itself reads the endpoint, headers and timeouts from the same
variables. Off, no provider is set (the API's no-op one answers) and no instrumentation is installed.

One trace per run: a run's `trace_id` (a W3C trace id, `Run.trace_id`) is the trace of the inbound request that
created it, or a fresh one. The web process records the dispatch of each run and carries, in the Celery
message's headers, the dispatch span's id and the time the run was queued; the worker continues the run's trace
from there: the queue wait (enqueue → claim), the claim, the run's execution, and below it the runtime round
trip, each proxy call (model calls with the GenAI attributes and token counts) and the deliveries. A run a
message did not carry (a retry, a sweeper re-send) still gets its own trace: its spans are rooted at a span
whose trace id is forced to the run's (`_run_trace_ids`).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

logger = logging.getLogger(__name__)

TRACER_NAME = "langbot_host"
# The Celery message header that carries, per run id, the dispatch span and the enqueue time.
TASK_HEADER = "langbot_trace"

_enabled = False
_tracer: trace.Tracer = trace.NoOpTracer()
# Run id → the context of its `run.execute` span, while the run executes on this worker: proxy calls arrive on
# the runtime connection's own tasks and find their run's span here.
_run_contexts: dict[str, otel_context.Context] = {}
# Run id → (traceparent of the dispatch span, enqueue time in ns), while a message is being built.
_dispatched: dict[str, tuple[str, int]] = {}
_DISPATCHED_MAX = 10_000
# What the task thread's current message carried (run id → (parent span id, enqueue time in ns)).
_carried: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("langbot_carried", default=None)
# A trace id the next root span must take (a run whose trace continues in this process without a carried parent).
_forced_trace_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("langbot_trace_id", default=None)

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")


def export_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard `OTEL_*` variables ask for trace export (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()}
    if "none" in exporters:
        return False
    if "otlp" in exporters:
        return True
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def tracing_enabled() -> bool:
    return _enabled


def tracing_configure(*, role: str) -> bool:
    """Install the exporting provider and the HTTP client instrumentation when export is configured; `role` names
    the process (web, worker) in the resource. Idempotent; returns whether tracing is on."""
    global _enabled, _tracer
    if _enabled:
        return True
    if not export_configured():
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from foundation.version import HOST_VERSION

    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "langbot-host",
            "service.version": HOST_VERSION,
            "langbot.process": role,
        }
    )
    provider = TracerProvider(resource=resource, id_generator=_run_trace_ids())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer(TRACER_NAME)
    _instrument_http_clients()
    _enabled = True
    logger.info("tracing: exporting spans over OTLP/HTTP (%s)", role)
    return True


def tracing_shutdown() -> None:
    """Flush what is buffered (a stopping worker must not lose its last runs' spans)."""
    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if _enabled and shutdown is not None:
        with contextlib.suppress(Exception):
            shutdown()


def tracing_flush(timeout_millis: int = 5000) -> None:
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if _enabled and flush is not None:
        flush(timeout_millis)


def _instrument_http_clients() -> None:
    # Every httpx client (the chat platforms' adapters, python-telegram-bot, the rerank calls) sends the
    # current span as `traceparent` and gets a client span. The OpenAI client is on httpx2, which this does
    # not reach: its clients take `http_event_hooks()` instead.
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    instrumentor = HTTPXClientInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()


def _run_trace_ids() -> Any:
    """The SDK's random ids, except that a root span started while `_forced_trace_id` is set takes that id (the
    SDK is imported only when tracing is on, hence the class made here)."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class RunTraceIds(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            forced = _forced_trace_id.get()
            return forced if forced is not None else super().generate_trace_id()

    return RunTraceIds()


# -- the run's trace id -----------------------------------------------------------------------------------


def run_trace_id_new() -> str:
    """The trace id of a run being created: the current span's trace (the inbound request, the gateway), so the
    run continues it; a fresh random one otherwise. 32 lowercase hex digits, a valid W3C trace id."""
    if _enabled:
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            return trace.format_trace_id(span_context.trace_id)
    return uuid.uuid4().hex


def trace_url(template: str, trace_id: str) -> str:
    """The trace UI's address of a trace (`LANGBOT_TRACE_URL_TEMPLATE`, with `{trace_id}`); empty when unset."""
    if not template or not trace_id:
        return ""
    return template.replace("{trace_id}", trace_id)


# -- generic spans ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def span(
    name: str, attributes: Mapping[str, Any] | None = None, *, kind: SpanKind = SpanKind.INTERNAL
) -> Iterator[Span | None]:
    """A span around a block, child of the current one; nothing at all while tracing is off."""
    if not _enabled:
        yield None
        return
    with _tracer.start_as_current_span(name, kind=kind, attributes=_clean(attributes or {})) as current:
        yield current


def traced(name: str) -> Callable[[_F], _F]:
    """`span(name)` around every call of a (synchronous) function."""

    def decorate(function: _F) -> _F:
        import functools

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _enabled:
                return function(*args, **kwargs)
            with _tracer.start_as_current_span(name):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def span_around(name: str, coroutine: Coroutine[Any, Any, _T], **attributes: Any) -> Coroutine[Any, Any, _T]:
    """`coroutine` inside `span(name)` (for a task's whole body); the coroutine itself while tracing is off."""
    if not _enabled:
        return coroutine

    async def traced() -> _T:
        with _tracer.start_as_current_span(name, attributes=_clean(attributes)):
            return await coroutine

    return traced()


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items() if value is not None}


# -- web side: the dispatch ---------------------------------------------------------------------------------


def runs_dispatched(run_ids: list[str]) -> None:
    """Record the dispatch of runs about to be sent to a worker: one `run.dispatch` span each, under the current
    span (the gateway's); its traceparent and the enqueue time wait for the message (`task_headers`)."""
    if not _enabled or not trace.get_current_span().get_span_context().is_valid:
        # Outside a trace (the sweeper re-sending a run) there is no dispatch to show: the worker roots the run's
        # spans in the run's own trace.
        return
    if len(_dispatched) > _DISPATCHED_MAX:
        _dispatched.clear()  # sends that failed never took theirs; the sweeper re-sends those runs untraced
    now = time.time_ns()
    for run_id in run_ids:
        with _tracer.start_as_current_span(
            "run.dispatch", kind=SpanKind.PRODUCER, attributes={"langbot.run_id": run_id}
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        if "traceparent" in carrier:
            _dispatched[run_id] = (carrier["traceparent"], now)


def task_headers(run_ids: list[str]) -> dict[str, Any] | None:
    """The Celery headers that carry the runs' dispatch spans to the worker; None when there is nothing to carry."""
    if not _enabled:
        return None
    carried = {run_id: _dispatched.pop(run_id) for run_id in run_ids if run_id in _dispatched}
    return {TASK_HEADER: carried} if carried else None


# -- worker side: the run -----------------------------------------------------------------------------------


@contextlib.contextmanager
def task_carry(request: Any) -> Iterator[None]:
    """While a `run_execute` message is handled on its task thread: what it carried, for `run_claimed`."""
    if not _enabled:
        yield
        return
    carried = request.get(TASK_HEADER) if request is not None else None
    token = _carried.set(carried if isinstance(carried, dict) else None)
    try:
        yield
    finally:
        _carried.reset(token)


def _parent_of(run_id: str, trace_id: str) -> tuple[otel_context.Context, int | None]:
    """The context the run's worker spans start in, and the enqueue time in ns if the message carried one."""
    carried = (_carried.get() or {}).get(run_id)
    enqueued: int | None = None
    if isinstance(carried, list | tuple) and len(carried) == 2:
        extracted = propagate.extract({"traceparent": str(carried[0])}, context=otel_context.Context())
        span_context = trace.get_current_span(extracted).get_span_context()
        if span_context.is_valid and trace.format_trace_id(span_context.trace_id) == trace_id:
            enqueued = int(carried[1]) if isinstance(carried[1], int) else None
            return extracted, enqueued
    return otel_context.Context(), enqueued


def run_claimed(
    *, run_id: str, trace_id: str, created_at: float, claim_started_ns: int, claim_ended_ns: int
) -> otel_context.Context | None:
    """Record a claimed run's queue wait (enqueue → claim) and its claim (`run.admission`), and return the context
    its execution continues in; None while tracing is off."""
    if not _enabled:
        return None
    try:
        trace_int = int(trace_id, 16)
    except ValueError:
        trace_int = 0
    if not trace_int:
        return None
    parent, enqueued = _parent_of(run_id, trace_id)
    carried = trace.get_current_span(parent).get_span_context().is_valid
    forced = _forced_trace_id.set(None if carried else trace_int)
    try:
        if not carried:
            # No carried dispatch span: the run's worker spans hang from a root of their own, in the run's trace.
            root = _tracer.start_span(
                "run", context=parent, attributes={"langbot.run_id": run_id}, start_time=claim_started_ns
            )
            root.end(claim_ended_ns)
            parent = trace.set_span_in_context(root, parent)
        attributes = {"langbot.run_id": run_id}
        start = enqueued if enqueued is not None else int(created_at * 1e9)
        wait = _tracer.start_span(
            "run.queue_wait", context=parent, kind=SpanKind.CONSUMER, attributes=attributes, start_time=start
        )
        wait.end(claim_started_ns)
        claim = _tracer.start_span("run.admission", context=parent, attributes=attributes, start_time=claim_started_ns)
        claim.end(claim_ended_ns)
    finally:
        _forced_trace_id.reset(forced)
    return parent


@contextlib.contextmanager
def run_executing(run_id: str, parent: otel_context.Context | None) -> Iterator[None]:
    """The `run.execute` span around a run's execution on the worker's loop; its proxy calls find it by run id."""
    if not _enabled or parent is None:
        yield
        return
    with _tracer.start_as_current_span("run.execute", context=parent, attributes={"langbot.run_id": run_id}):
        _run_contexts[run_id] = otel_context.get_current()
        try:
            yield
        finally:
            _run_contexts.pop(run_id, None)


def proxy_span_start(run_id: str, action: str, **attributes: Any) -> Span | None:
    """A proxy call's span (child of its run's `run.execute`); end it with `proxy_span_end`."""
    if not _enabled:
        return None
    parent = _run_contexts.get(run_id)
    if parent is None:
        return None
    attributes["langbot.proxy.action"] = action
    return _tracer.start_span(action, context=parent, kind=SpanKind.SERVER, attributes=_clean(attributes))


def proxy_span_end(current: Span | None, outcome: str) -> None:
    if current is None or not current.is_recording():
        return
    current.set_attribute("langbot.proxy.outcome", outcome)
    if outcome != "ok":
        current.set_status(Status(StatusCode.ERROR, outcome))
    current.end()


@contextlib.contextmanager
def span_current(current: Span | None) -> Iterator[None]:
    """Make `current` the active span for a block (its children, and the `traceparent` sent, hang from it)."""
    if current is None:
        yield
        return
    with trace.use_span(current, end_on_exit=False):
        yield


# -- model calls (the GenAI semantic conventions) -----------------------------------------------------------


def model_span_start(*, operation: str, model: str, model_id: str, provider_id: str) -> Span | None:
    """A model call's client span, named `{operation} {model}` as the GenAI conventions name it. Every provider
    here speaks the OpenAI API (`gen_ai.provider.name`); which of the workspace's providers and models it was are
    the host's own attributes."""
    if not _enabled:
        return None
    return _tracer.start_span(
        f"{operation} {model}",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": model,
            "gen_ai.provider.name": "openai",
            "langbot.model_id": model_id,
            "langbot.model_provider": provider_id,
        },
    )


def model_span_end(
    current: Span | None, *, usage: Mapping[str, Any] | None, error: BaseException | None = None
) -> None:
    if current is None or not current.is_recording():
        return
    if usage:
        input_tokens = usage.get("prompt_tokens", usage.get("input_tokens"))
        output_tokens = usage.get("completion_tokens", usage.get("output_tokens"))
        if isinstance(input_tokens, int):
            current.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        if isinstance(output_tokens, int):
            current.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if error is not None:
        current.set_status(Status(StatusCode.ERROR, type(error).__name__))
        current.set_attribute("error.type", type(error).__name__)
    current.end()


# -- outbound HTTP that the httpx instrumentation does not reach ---------------------------------------------


async def _traceparent_inject(request: Any) -> None:
    propagate.inject(request.headers)


def http_event_hooks() -> dict[str, list[Callable[..., Any]]] | None:
    """`event_hooks` for an httpx2 `AsyncClient` (the OpenAI client's) that send the current span as
    `traceparent`; None while tracing is off."""
    if not _enabled:
        return None
    return {"request": [_traceparent_inject]}


def remote_parent(trace_id: str, span_id: str) -> otel_context.Context:
    """A context whose parent is a span of another process (tests, and callers that carry ids by hand)."""
    span_context = SpanContext(
        trace_id=int(trace_id, 16), span_id=int(span_id, 16), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def asgi_wrap(application: Any) -> Any:
    """The ASGI application with a server span per HTTP request, when tracing is on."""
    if not _enabled:
        return application
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    # One span per request: a span per body chunk sent or read would swamp a streamed answer (SSE, `?wait=`).
    return OpenTelemetryMiddleware(application, exclude_spans=["receive", "send"])
