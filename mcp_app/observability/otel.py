"""OpenTelemetry traces of mcp_app (the ``mcp-host[otel]`` extra): what ``observability.tracing`` switches on.

Only this module imports ``opentelemetry``, and only ``tracing.configure`` imports it, so a project without the
extra never loads it. ``start()`` installs the SDK's ``TracerProvider`` unless the application has one, instruments
Celery (and Django's views at start-up), and returns the ``Tracing`` the hooks use (``asgi``, ``trace``,
``tool_call``, ``webhook``). Nothing records arguments, results, headers, URLs or tokens. docs/observability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from .. import __version__
from ..protocol.context import CallContext, InvalidToolArguments, RequestContext
from ..protocol.descriptors import ToolDescriptor
from ..protocol.errors import ProtocolError

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImproperlyConfigured(
        "MCP_APP['TRACING'] is on but OpenTelemetry is not installed: pip install 'mcp-host[otel]'."
    ) from exc

INSTRUMENTATION = "mcp_app"
DEFAULT_SERVICE_NAME = "mcp-host"

# Attribute names (OpenTelemetry semantic conventions: MCP, GenAI, JSON-RPC, errors).
MCP_METHOD_NAME = "mcp.method.name"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
MCP_SESSION_ID = "mcp.session.id"
MCP_RESOURCE_URI = "mcp.resource.uri"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_PROMPT_NAME = "gen_ai.prompt.name"
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
ERROR_TYPE = "error.type"
NETWORK_TRANSPORT = "network.transport"
NETWORK_PROTOCOL_NAME = "network.protocol.name"
HTTP_REQUEST_METHOD = "http.request.method"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
# The host's own: which tenant, server, agent and protocol era a span belongs to, and where a tool ran.
TENANT = "mcp_host.tenant"
SERVER = "mcp_host.server"
AGENT = "mcp_host.agent"
ERA = "mcp_host.era"
TOOL_EXECUTION = "mcp_host.tool.execution"

EXECUTE_TOOL = "execute_tool"
# The W3C keys a request's ``_meta`` may carry (SEP-414), read by the configured propagators.
META_KEYS = ("traceparent", "tracestate", "baggage")
MCP_ROUTE = "/mcp/{server_id}"


class Tracing:
    """The live tracing of this process: one tracer, and the instrumentations ``start`` switched on."""

    def __init__(self, tracer: trace.Tracer, provider: Any, instrumentors: list[Any]) -> None:
        self.tracer = tracer
        self.provider = provider
        self._instrumentors = instrumentors
        self._asgi: dict[int, Any] = {}  # by id of the wrapped application (which lives as long as the process)

    def stop(self) -> None:
        """Undo the instrumentations (the provider stays: OpenTelemetry installs one per process)."""
        for instrumentor in self._instrumentors:
            instrumentor.uninstrument()
        self._instrumentors = []

    def asgi(self, app: Any) -> Any:
        """``app`` (the MCP consumer) inside the ASGI instrumentation: an HTTP SERVER span per request,
        continuing the request headers' trace context (no span per ASGI message); made once per ``app``."""
        wrapped = self._asgi.get(id(app))
        if wrapped is not None:
            return wrapped
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        def details(scope: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            return f"{scope.get('method', 'HTTP')} {MCP_ROUTE}", {"http.route": MCP_ROUTE}

        wrapped = self._asgi[id(app)] = OpenTelemetryMiddleware(
            app, default_span_details=details, tracer_provider=self.provider, exclude_spans=["receive", "send"]
        )
        return wrapped

    async def trace(
        self,
        method: str,
        request_id: str | int,
        params: Any,
        ctx: RequestContext,
        answer: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Await ``answer`` inside the request's SERVER span (the protocol's ``RequestTracer`` port)."""
        params = params if isinstance(params, dict) else {}
        attributes: dict[str, Any] = {
            MCP_METHOD_NAME: method,
            MCP_PROTOCOL_VERSION: ctx.protocol_version,
            JSONRPC_REQUEST_ID: str(request_id),
            NETWORK_TRANSPORT: "tcp",
            NETWORK_PROTOCOL_NAME: "http",
            ERA: ctx.era,
            **_where(ctx),
        }
        if ctx.session is not None:
            attributes[MCP_SESSION_ID] = ctx.session.key
        target = _target(method, params, attributes)
        parent = meta_context(params.get("_meta"))
        links = None
        if parent is not None:
            http = trace.get_current_span().get_span_context()
            links = [Link(http)] if http.is_valid else None
        span = self.tracer.start_span(
            f"{method} {target}" if target else method,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            links=links,
        )
        result = await _in_span(span, answer())  # raises the transport's 503, or a cancellation
        if isinstance(result, dict) and isinstance(result.get("error"), dict):
            code = str(result["error"].get("code"))
            span.set_attribute(RPC_RESPONSE_STATUS_CODE, code)
            _failed(span, code)  # no description: an error's message may quote an argument's value
        elif isinstance(result, dict) and isinstance(result.get("result"), dict) and result["result"].get("isError"):
            _failed(span, "tool_error")
        span.end()
        return result

    async def tool_call(
        self, tool: ToolDescriptor, call: CallContext, run: Awaitable[dict[str, Any]]
    ) -> dict[str, Any]:
        """Await ``run`` (the tool's run) inside an ``execute_tool`` span, current while it runs."""
        ctx = call.request
        attributes = {
            GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
            GEN_AI_TOOL_NAME: tool.name,
            TOOL_EXECUTION: tool.execution,
            ERA: ctx.era,
            **_where(ctx),
        }
        if call.request_id is not None:
            attributes[JSONRPC_REQUEST_ID] = str(call.request_id)
        span = self.tracer.start_span(f"{EXECUTE_TOOL} {tool.name}", kind=SpanKind.INTERNAL, attributes=attributes)
        result = await _in_span(span, run)
        if result.get("isError"):
            _failed(span, "tool_error")
        span.end()
        return result

    @contextlib.contextmanager
    def webhook(self, method: str, url: str, headers: MutableMapping[str, str]) -> Iterator[None]:
        """A CLIENT span around one webhook request; ``headers`` get its ``traceparent`` (and ``tracestate``)."""
        parts = urlsplit(url)
        attributes: dict[str, Any] = {HTTP_REQUEST_METHOD: method.upper(), SERVER_ADDRESS: parts.hostname or ""}
        with contextlib.suppress(ValueError):
            attributes[SERVER_PORT] = parts.port or (443 if parts.scheme == "https" else 80)
        span = self.tracer.start_span(method.upper(), kind=SpanKind.CLIENT, attributes=attributes)
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            propagate.inject(headers)
            try:
                yield
            except BaseException as error:
                _failed(span, str(getattr(error, "code", "")) or type(error).__name__)
                raise


async def _in_span(span: trace.Span, run: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """Await ``run`` with ``span`` current; a failure marks the span and ends it, else the caller reads the
    result onto the span and ends it."""
    with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        try:
            return await run
        except BaseException as error:
            _failed(span, _outcome_of(error))
            span.end()
            raise


def _where(ctx: RequestContext) -> dict[str, str]:
    where = {SERVER: ctx.server.server_id}
    if ctx.principal is not None:
        where[TENANT] = ctx.principal.tenant
        where[AGENT] = ctx.principal.agent_id
    return where


def _target(method: str, params: Mapping[str, Any], attributes: dict[str, Any]) -> str:
    """The span name's target (tool or prompt name, resource URI), recorded under its attribute."""
    if method == "tools/call" and isinstance(params.get("name"), str):
        attributes[GEN_AI_TOOL_NAME] = params["name"]
        attributes[GEN_AI_OPERATION_NAME] = EXECUTE_TOOL
        return str(params["name"])
    if method == "prompts/get" and isinstance(params.get("name"), str):
        attributes[GEN_AI_PROMPT_NAME] = params["name"]
        return str(params["name"])
    if method.startswith("resources/") and isinstance(params.get("uri"), str):
        attributes[MCP_RESOURCE_URI] = params["uri"]
    return ""


def meta_context(meta: Any) -> otel_context.Context | None:
    """The trace context a request's ``_meta`` carries (W3C ``traceparent``/``tracestate``), or ``None``."""
    if not isinstance(meta, dict) or "traceparent" not in meta:
        return None
    carrier = {key: meta[key] for key in META_KEYS if isinstance(meta.get(key), str)}
    extracted = propagate.extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def _outcome_of(error: BaseException) -> str:
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if isinstance(error, InvalidToolArguments):
        return "invalid_arguments"
    if isinstance(error, ProtocolError):
        return str(error.code)
    return type(error).__name__


def _failed(span: trace.Span, error_type: str) -> None:
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR))


def _provider() -> Any:
    """The application's SDK ``TracerProvider``, or a new one configured from the ``OTEL_*`` variables."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for exporter in _exporters():
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def _exporters() -> list[Any]:
    names = [name.strip() for name in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if name.strip()]
    exporters: list[Any] = []
    for name in names:
        if name == "none":
            continue
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            exporters.append(_otlp_exporter())
        else:
            raise ImproperlyConfigured(f"OTEL_TRACES_EXPORTER {name!r} is not supported here: otlp, console or none.")
    return exporters


def _otlp_exporter() -> Any:
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    )
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError as exc:
            raise ImproperlyConfigured(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc installed."
            ) from exc
        return GrpcExporter()
    if protocol != "http/protobuf":
        raise ImproperlyConfigured(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not supported: http/protobuf or grpc.")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _flush_before_pool_processes_exit(provider: Any) -> None:
    """A Celery pool process ends without running ``atexit`` hooks: export its last spans before it goes."""
    from celery.signals import worker_process_shutdown

    def flush(**_kwargs: Any) -> None:
        provider.force_flush()

    worker_process_shutdown.connect(flush, weak=False, dispatch_uid="mcp_app.observability.otel.flush")


def start(*, django_views: bool) -> Tracing:
    """Tracing for this process (see the module docstring); ``django_views``: also instrument Django's request
    handling, which only takes effect before the first handler is built (at start-up)."""
    provider = _provider()
    instrumentors: list[Any] = []

    def instrument(instrumentor: Any) -> None:
        if not instrumentor.is_instrumented_by_opentelemetry:  # the application's own stays the application's
            instrumentor.instrument(tracer_provider=provider)
            instrumentors.append(instrumentor)

    try:
        import celery  # noqa: F401  (the [celery] extra)
    except ImportError:
        pass
    else:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        instrument(CeleryInstrumentor())
        _flush_before_pool_processes_exit(provider)
    if django_views:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        instrument(DjangoInstrumentor())
    tracer = trace.get_tracer(INSTRUMENTATION, __version__, tracer_provider=provider)
    return Tracing(tracer, provider, instrumentors)
