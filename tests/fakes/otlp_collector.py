"""A local OTLP/HTTP trace collector for the tracing tests: it takes `POST /v1/traces` with a protobuf
`ExportTraceServiceRequest` (gzip-compressed or not), as the OTLP specification defines it, decodes it with the
`opentelemetry-proto` classes and keeps each span (`spans`) with its resource's attributes; it answers an empty
`ExportTraceServiceResponse`, as a collector does on success. `serving_collector()` starts one on a free port and
always stops it."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


@dataclass
class CollectedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, which) if which else None


def _attributes(values: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in values if isinstance(kv, KeyValue)}


class FakeCollector:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[CollectedSpan] = []
        self.requests = 0
        handler = type("Handler", (_Handler,), {"collector": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter appends `/v1/traces`)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        collected = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    collected.append(
                        CollectedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=_attributes(span.attributes),
                            resource=resource,
                        )
                    )
        with self.lock:
            self.requests += 1
            self.spans.extend(collected)

    def of_trace(self, trace_id: str) -> list[CollectedSpan]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, found: Callable[[FakeCollector], bool], timeout: float = 30) -> None:
        """Wait until `found(self)` holds (spans arrive in batches, a few seconds apart)."""
        deadline = time.monotonic() + timeout
        while not found(self):
            if time.monotonic() > deadline:
                names = sorted({s.name for s in self.spans})
                raise AssertionError(f"the collector did not get the expected spans within {timeout}s: {names}")
            time.sleep(0.1)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    collector: FakeCollector

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path != "/v1/traces":
            self._answer(404, b"")
            return
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        try:
            self.collector.take(body)
        except Exception:
            self._answer(400, b"")
            return
        self._answer(200, ExportTraceServiceResponse().SerializeToString())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serving_collector() -> Iterator[FakeCollector]:
    collector = FakeCollector()
    collector._thread.start()
    try:
        yield collector
    finally:
        collector._server.shutdown()
        collector._server.server_close()
