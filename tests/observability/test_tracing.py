"""OpenTelemetry traces at the wire, in process: the real router and consumer with ``MCP_APP["TRACING"]`` on and the
SDK's in-memory exporter as the test exporter (a ``TracerProvider`` installed once for the test process, before
tracing is switched on, so mcp_app uses it as an application's own).

Each test reads the finished spans: the HTTP span of the ASGI instrumentation, the MCP request span
(``tools/call echo``) and the tool's ``execute_tool echo`` span, their attributes and how they are parented, with
the caller's trace taken from ``params._meta.traceparent`` or from the ``traceparent`` header; an http tool's
webhook receives ``traceparent``. With tracing off nothing is recorded, and mcp_app needs no OpenTelemetry.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from mcp_app.models import Tool, Webhook
from tests.helpers import call, modern_body, routing_headers, rpc
from tests.webhook_server import WebhookServer

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
HEADER_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
HEADER_TRACEPARENT = f"00-{HEADER_TRACE_ID}-b7ad6b7169203331-01"


@pytest.fixture(scope="session")
def span_exporter() -> InMemorySpanExporter:
    """The test exporter, on the process's one SDK provider (installed here unless one is already)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(span_exporter: InMemorySpanExporter, settings: Any) -> Iterator[InMemorySpanExporter]:
    """Tracing on for one test (off again when ``settings`` is restored)."""
    settings.MCP_APP = {**settings.MCP_APP, "TRACING": True}
    span_exporter.clear()
    yield span_exporter
    span_exporter.clear()


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = [span for span in exporter.get_finished_spans() if span.name == name]
    assert len(found) == 1, [span.name for span in exporter.get_finished_spans()]
    return found[0]


def trace_id(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}"


def parent_of(span: ReadableSpan) -> str | None:
    return f"{span.parent.span_id:016x}" if span.parent is not None else None


def span_id(span: ReadableSpan) -> str:
    return f"{span.context.span_id:016x}"


async def test_an_inline_tool_call_has_a_request_span_and_a_tool_span_with_mcp_attributes(
    access: Any, spans: InMemorySpanExporter
) -> None:
    reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=7))
    assert reply.status == 200, reply.body
    assert reply.json()["result"]["content"] == [{"type": "text", "text": "hi"}]

    http = named(spans, "POST /mcp/{server_id}")
    request = named(spans, "tools/call echo")
    tool = named(spans, "execute_tool echo")
    assert (http.kind, request.kind, tool.kind) == (SpanKind.SERVER, SpanKind.SERVER, SpanKind.INTERNAL)
    assert parent_of(request) == span_id(http)
    assert parent_of(tool) == span_id(request)
    assert trace_id(http) == trace_id(request) == trace_id(tool)
    assert http.attributes is not None and http.attributes["http.route"] == "/mcp/{server_id}"
    assert dict(request.attributes or {}) == {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": "2025-03-26",
        "jsonrpc.request.id": "7",
        "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool",
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "mcp_host.era": "legacy",
        "mcp_host.server": access.server.server_id,
        "mcp_host.tenant": access.tenant.slug,
        "mcp_host.agent": access.agent.agent_id,
    }
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "jsonrpc.request.id": "7",
        "mcp_host.tool.execution": "inline",
        "mcp_host.era": "legacy",
        "mcp_host.server": access.server.server_id,
        "mcp_host.tenant": access.tenant.slug,
        "mcp_host.agent": access.agent.agent_id,
    }
    assert request.status.status_code == tool.status.status_code == StatusCode.UNSET


async def test_the_request_continues_the_trace_in_meta_traceparent(access: Any, spans: InMemorySpanExporter) -> None:
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"traceparent": TRACEPARENT}}
    reply = await call(access, rpc("tools/call", params), headers={"traceparent": HEADER_TRACEPARENT})
    assert reply.status == 200, reply.body

    http = named(spans, "POST /mcp/{server_id}")
    request = named(spans, "tools/call echo")
    tool = named(spans, "execute_tool echo")
    # The HTTP exchange continues the header's trace; the MCP request the one its _meta names, linked to it.
    assert trace_id(http) == HEADER_TRACE_ID
    assert trace_id(request) == trace_id(tool) == TRACE_ID
    assert parent_of(request) == PARENT_ID
    assert request.parent is not None and request.parent.is_remote
    assert [f"{link.context.span_id:016x}" for link in request.links] == [span_id(http)]
    assert parent_of(tool) == span_id(request)


async def test_without_meta_the_request_continues_the_traceparent_header(
    access: Any, spans: InMemorySpanExporter
) -> None:
    reply = await call(
        access,
        rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}),
        headers={"traceparent": HEADER_TRACEPARENT},
    )
    assert reply.status == 200, reply.body

    http = named(spans, "POST /mcp/{server_id}")
    request = named(spans, "tools/call echo")
    assert trace_id(http) == trace_id(request) == trace_id(named(spans, "execute_tool echo")) == HEADER_TRACE_ID
    assert parent_of(http) == "b7ad6b7169203331"
    assert parent_of(request) == span_id(http)
    assert not request.links


async def test_a_stateless_era_request_continues_its_meta_trace(access: Any, spans: InMemorySpanExporter) -> None:
    body = modern_body(
        "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"traceparent": TRACEPARENT}}
    )
    reply = await call(access, body, headers=routing_headers(body))
    assert reply.status == 200, reply.body

    request = named(spans, "tools/call echo")
    assert trace_id(request) == TRACE_ID and parent_of(request) == PARENT_ID
    assert request.attributes is not None
    assert (request.attributes["mcp_host.era"], request.attributes["mcp.protocol.version"]) == ("modern", "2026-07-28")
    assert trace_id(named(spans, "execute_tool echo")) == TRACE_ID


async def test_an_error_answer_marks_the_request_span(access: Any, spans: InMemorySpanExporter) -> None:
    reply = await call(access, rpc("tools/call", {"name": "no_such_tool", "arguments": {}}))
    assert reply.json()["error"]["code"] == -32602

    request = named(spans, "tools/call no_such_tool")
    assert request.status.status_code == StatusCode.ERROR
    assert request.attributes is not None
    assert request.attributes["error.type"] == request.attributes["rpc.response.status_code"] == "-32602"
    assert [span.name for span in spans.get_finished_spans() if span.name.startswith("execute_tool")] == []


async def test_a_malformed_meta_traceparent_is_ignored(access: Any, spans: InMemorySpanExporter) -> None:
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"traceparent": "not-a-trace", "tracestate": 3}}
    reply = await call(access, rpc("tools/call", params))
    assert reply.status == 200 and "result" in reply.json()
    assert parent_of(named(spans, "tools/call echo")) == span_id(named(spans, "POST /mcp/{server_id}"))


def add_http_tool(tool_factory: Any, server: Any, url: str) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = tool_factory(server, "forecast", kind=Tool.Kind.HTTP, input_schema=schema, position=50)
    webhook = Webhook(tool=tool, url=url)
    webhook.set_secret_headers({"Authorization": "Bearer hook-secret"})
    webhook.save()


async def test_a_webhook_request_carries_the_trace(
    access: Any, spans: InMemorySpanExporter, tool_factory: Any, webhook_server: WebhookServer, settings: Any
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}
    url = webhook_server.url("/both") + "?key=in-the-url"
    await database_sync_to_async(add_http_tool)(tool_factory, access.server, url)
    params = {"name": "forecast", "arguments": {"city": "Oslo"}, "_meta": {"traceparent": TRACEPARENT}}
    reply = await call(access, rpc("tools/call", params))
    assert reply.json()["result"]["structuredContent"] == {"temp": 30}

    (received,) = webhook_server.requests
    client = named(spans, "POST")
    assert client.kind == SpanKind.CLIENT
    assert received.headers["traceparent"] == f"00-{TRACE_ID}-{span_id(client)}-01"
    assert parent_of(client) == span_id(named(spans, "execute_tool forecast"))
    # Method, host and port; never the URL (it may carry a key) nor a header.
    assert dict(client.attributes or {}) == {
        "http.request.method": "POST",
        "server.address": "127.0.0.1",
        "server.port": webhook_server.port,
    }
    recorded = json.dumps([dict(span.attributes or {}) for span in spans.get_finished_spans()])
    assert "in-the-url" not in recorded and "hook-secret" not in recorded


async def test_with_tracing_off_nothing_is_recorded(
    access: Any, span_exporter: InMemorySpanExporter, tool_factory: Any, webhook_server: WebhookServer, settings: Any
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "HTTP_TOOL_ALLOWED_NETWORKS": ["127.0.0.1"]}
    span_exporter.clear()
    await database_sync_to_async(add_http_tool)(tool_factory, access.server, webhook_server.url("/both"))
    params = {"name": "forecast", "arguments": {"city": "Oslo"}, "_meta": {"traceparent": TRACEPARENT}}
    reply = await call(access, rpc("tools/call", params), headers={"traceparent": HEADER_TRACEPARENT})
    assert reply.json()["result"]["structuredContent"] == {"temp": 30}
    assert span_exporter.get_finished_spans() == ()
    (received,) = webhook_server.requests
    assert "traceparent" not in {name.lower() for name in received.headers}


BLOCK_OPENTELEMETRY = """
    import importlib.abc, sys

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError(f"{name} is not installed (blocked by the test)")
            return None

    sys.meta_path.insert(0, Blocked())
"""


def run_without_opentelemetry(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    program = textwrap.dedent(BLOCK_OPENTELEMETRY) + textwrap.dedent(code)
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "mcp_host.settings", **env}
    for name in [name for name in environment if name.startswith("OTEL_")]:
        environment.pop(name)
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO_ROOT, env=environment, timeout=120
    )


def test_mcp_app_runs_without_opentelemetry_when_tracing_is_off() -> None:
    probe = run_without_opentelemetry(
        """
        import django
        django.setup()
        import mcp_app.transport.routing, mcp_app.runtime.execution, mcp_app.runtime.webhooks, mcp_app.workers.running.tasks
        import mcp_host.asgi
        from mcp_app.observability import tracing
        assert tracing.active() is None
        print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
        """,
        MCP_TRACING="0",
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"


def test_tracing_on_without_opentelemetry_says_which_extra_to_install() -> None:
    probe = run_without_opentelemetry("import django\ndjango.setup()\n", MCP_TRACING="1")
    assert probe.returncode != 0
    assert "ImproperlyConfigured" in probe.stderr
    assert "pip install 'mcp-host[otel]'" in probe.stderr


async def test_a_session_is_named_by_its_key_never_by_its_id(access: Any, spans: InMemorySpanExporter) -> None:
    init = await call(
        access,
        rpc(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        ),
    )
    session_id = init.headers["mcp-session-id"]
    session = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
    assert (await call(access, rpc("notifications/initialized", id=None), headers=session)).status == 202
    spans.clear()
    reply = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}), headers=session)
    assert reply.status == 200, reply.body

    request = named(spans, "tools/call echo")
    assert request.attributes is not None
    key = request.attributes["mcp.session.id"]
    assert isinstance(key, str) and key and key != session_id
    recorded = json.dumps([dict(span.attributes or {}) for span in spans.get_finished_spans()])
    assert session_id not in recorded


async def test_each_request_of_a_batch_has_its_own_span(access: Any, spans: InMemorySpanExporter) -> None:
    batch = [
        rpc("tools/call", {"name": "echo", "arguments": {"text": "one"}}, id=1),
        rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, id=2),
    ]
    reply = await call(access, batch, headers={"mcp-protocol-version": "2025-03-26"})
    assert reply.status == 200 and len(reply.json()) == 2, reply.body

    http = named(spans, "POST /mcp/{server_id}")
    for name, request_id in (("echo", "1"), ("add", "2")):
        request = named(spans, f"tools/call {name}")
        assert parent_of(request) == span_id(http)
        assert request.attributes is not None and request.attributes["jsonrpc.request.id"] == request_id
        assert parent_of(named(spans, f"execute_tool {name}")) == span_id(request)


async def test_a_streamed_answer_is_traced_to_its_end(access: Any, spans: InMemorySpanExporter) -> None:
    params = {
        "name": "progress_demo",
        "arguments": {"steps": 3},
        "_meta": {"progressToken": "p", "traceparent": TRACEPARENT},
    }
    reply = await call(access, rpc("tools/call", params, id=4))
    assert reply.status == 200 and reply.content_type is not None and reply.content_type.startswith("text/event-stream")
    messages = reply.sse_messages()
    assert [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"] == [1, 2, 3]
    assert messages[-1]["result"]["content"] == [{"type": "text", "text": "Completed 3 steps."}]

    http = named(spans, "POST /mcp/{server_id}")
    # The ASGI instrumentation's HTTP attributes (the older names unless OTEL_SEMCONV_STABILITY_OPT_IN=http).
    assert http.attributes is not None and http.attributes["http.status_code"] == 200
    assert trace_id(named(spans, "execute_tool progress_demo")) == TRACE_ID


async def test_no_argument_value_reaches_a_span(access: Any, spans: InMemorySpanExporter, tool_factory: Any) -> None:
    """The error of an invalid argument quotes its value to the client; the spans say only the code."""
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}}
    await database_sync_to_async(tool_factory)(
        access.server, "counter", input_schema=schema, static_result={"content": []}, position=9
    )
    reply = await call(access, rpc("tools/call", {"name": "counter", "arguments": {"count": "value-7c1e"}}))
    assert reply.json()["error"]["code"] == -32602 and "value-7c1e" in reply.json()["error"]["message"]

    request, tool = named(spans, "tools/call counter"), named(spans, "execute_tool counter")
    assert request.attributes is not None and tool.attributes is not None
    assert request.attributes["error.type"] == "-32602" and tool.attributes["error.type"] == "invalid_arguments"
    assert request.status.status_code == tool.status.status_code == StatusCode.ERROR
    exported = [
        (span.name, dict(span.attributes or {}), span.status.description, [event.name for event in span.events])
        for span in spans.get_finished_spans()
    ]
    assert "value-7c1e" not in json.dumps(exported)
    assert all(not span.events for span in spans.get_finished_spans())


def test_an_unsupported_exporter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from mcp_app.observability import otel

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ImproperlyConfigured, match="'zipkin' is not supported"):
        otel._exporters()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ImproperlyConfigured, match="'http/json' is not supported"):
        otel._exporters()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert otel._exporters() == []


async def test_the_documented_curl_is_answered_in_the_trace_it_names(
    access: Any, spans: InMemorySpanExporter, transactional_db: Any
) -> None:
    """docs/observability.md's curl, as written (with make run's demo token for ``$TOKEN``), through the real
    router and consumer: a tool result, and the request span in the trace of its ``_meta.traceparent``."""
    doc = (REPO_ROOT / "docs" / "observability.md").read_text()
    [command] = [block for block in re.findall(r"```sh\n(.*?)```", doc, re.S) if block.startswith("curl")]
    words = shlex.split(command.replace("\\\n", " "))
    url = urlsplit(next(word for word in words if word.startswith("http")))
    headers = dict(words[i + 1].split(": ", 1) for i, word in enumerate(words) if word == "-H")
    body = words[words.index("-d") + 1]
    out = io.StringIO()
    await database_sync_to_async(call_command)("mcp_demo", "--json", stdout=out)
    token = json.loads(out.getvalue())["token"]
    headers = {name.lower(): value.replace("$TOKEN", token) for name, value in headers.items()}
    reply = await call(access, path=url.path, query=url.query, headers=headers, raw=body.encode())
    assert reply.status == 200, reply.body
    assert reply.json()["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert trace_id(named(spans, "tools/call echo")) == TRACE_ID
