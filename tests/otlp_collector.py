"""A tiny OTLP/HTTP trace collector on 127.0.0.1 (ephemeral port, its own thread): where the processes a test starts
(daphne, Celery workers) export their spans with the real OTLP exporter, as they would to a collector.

It accepts ``POST /v1/traces`` (``application/x-protobuf``, as the SDK's ``OTLPSpanExporter`` sends it), decodes the
``ExportTraceServiceRequest`` with ``opentelemetry-proto`` and keeps each span flattened (``Span``). Import
``otlp_collector_fixture`` (the ``otlp_collector`` fixture) into a test module to use it; ``environment(service)``
is what a process needs to export there quickly (short batch delay).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass
class Collector:
    port: int = 0
    spans: list[Span] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self, service: str) -> dict[str, str]:
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_TRACES_EXPORTER": "otlp",
        }

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            service=str(resource.get("service.name", "")),
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self.arrived:
            self.spans.extend(found)
            self.arrived.notify_all()

    def wait_for(self, predicate: Callable[[Span], bool], what: str, timeout: float = 20.0) -> Span:
        """The first span that satisfies ``predicate``, waiting (bounded) for it to be exported."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                for span in self.spans:
                    if predicate(span):
                        return span
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = [(span.service, span.name) for span in self.spans]
                    pytest.fail(f"the collector never received {what}; it has {names}")
                self.arrived.wait(remaining)

    def by_id(self, span_id: str) -> Span | None:
        with self.arrived:
            return next((span for span in self.spans if span.span_id == span_id), None)


def _handler(collector: Collector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            collector.add(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    return Handler


@pytest.fixture(name="otlp_collector")
def otlp_collector_fixture() -> Iterator[Collector]:
    collector = Collector()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(collector))
    server.daemon_threads = True
    collector.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="otlp-collector", daemon=True)
    thread.start()
    try:
        yield collector
    finally:
        server.shutdown()
        server.server_close()
