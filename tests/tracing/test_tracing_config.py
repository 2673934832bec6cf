"""When the host exports traces: only when the standard `OTEL_*` variables ask for it (docs/tracing.md); and the
run's trace id, which the runner is told and the admin links to."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry import trace

from foundation import tracing
from foundation.tracing import export_configured, trace_url


@pytest.mark.parametrize(
    ("environ", "exports"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console, otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, False),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, False),
    ],
)
def test_export_is_on_only_when_the_otel_variables_configure_it(environ, exports):
    assert export_configured(environ) is exports


def test_without_export_no_provider_is_set_and_the_helpers_do_nothing(monkeypatch):
    # given an environment without OTLP export
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)

    # when a process configures tracing
    assert tracing.tracing_configure(role="web") is False

    # then the API's own no-op provider answers and no span is recorded or carried
    assert not tracing.tracing_enabled()
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    with tracing.span("anything") as current:
        assert current is None
    tracing.runs_dispatched(["run-1"])
    assert tracing.task_headers(["run-1"]) is None
    assert tracing.http_event_hooks() is None
    application = object()
    assert tracing.asgi_wrap(application) is application


def _event(binding):
    from transcripts.models import EventLog

    return EventLog.objects.create(
        workspace=binding.workspace,
        event_id=f"evt-{uuid.uuid4().hex[:8]}",
        event_type="message.received",
        source="api",
        conversation_id="conv-1",
        input={"text": "hi"},
    )


def test_a_run_made_outside_any_trace_gets_a_w3c_trace_id_of_its_own(db):
    from runners.lifecycle.services import run_build
    from tests.factories import AgentBindingFactory

    binding = AgentBindingFactory.create()
    event = _event(binding)

    first = run_build(event=event, binding=binding, observer=False)
    second = run_build(event=event, binding=binding, observer=False)

    assert len(first.trace_id) == 32
    assert int(first.trace_id, 16) != 0
    assert first.trace_id != second.trace_id
    assert first.trace_hex == first.trace_id


def test_a_run_made_while_a_request_is_traced_continues_the_requests_trace(db, monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider

    from runners.lifecycle.services import run_build
    from tests.factories import AgentBindingFactory

    binding = AgentBindingFactory.create()
    event = _event(binding)
    monkeypatch.setattr(tracing, "_enabled", True)
    tracer = TracerProvider().get_tracer("test")

    with tracer.start_as_current_span("POST /webhook") as request_span:
        run = run_build(event=event, binding=binding, observer=False)

    assert run.trace_id == trace.format_trace_id(request_span.get_span_context().trace_id)


def test_a_run_recorded_before_runs_had_trace_ids_is_traced_under_its_run_id(db):
    from runners.models import Run

    run = Run(trace_id="")

    assert run.trace_hex == run.run_id.hex


def test_the_trace_link_fills_the_configured_template():
    assert trace_url("http://jaeger:16686/trace/{trace_id}", "ab" * 16) == f"http://jaeger:16686/trace/{'ab' * 16}"
    assert trace_url("", "ab" * 16) == ""
