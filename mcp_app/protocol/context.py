"""What a handler knows about the request it serves, and the interfaces to the layers below.

``RequestContext`` is built by the transport for each HTTP request. ``ServerCatalog`` and ``ToolDescriptor``
are plain data the catalog layer produces; ``ToolRunner`` is the interface the runtime layer implements; the
back-channel to the client is the ``Outbound`` port (``protocol.ports``). Nothing here touches a database:
implementations are injected.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .handshake_tasks import tool_execution
from .ports import NO_CHANNEL, Outbound
from .versions import ALL_VERSIONS, LEGACY

# Sends one JSON-RPC notification on the request's response (progress, logs); usually ``outbound.notify``, gated
# by the task runner once a call has become a task.
Emit = Callable[[dict[str, Any]], Awaitable[None]]


async def discard(message: dict[str, Any]) -> None:
    """An ``Emit`` for contexts where nothing can be streamed back."""


@dataclass(frozen=True, slots=True)
class ServerDescription:
    """The public face of one hosted MCP server, including which protocol revisions it serves."""

    server_id: str
    name: str
    title: str = ""
    version: str = ""
    instructions: str = ""
    protocol_versions: tuple[str, ...] = ALL_VERSIONS
    pk: int | None = None  # the server's row (opaque here; worker calls record it)
    # The catalog revision this request is served (opaque here: catalog version, creation time in ISO form); a
    # worker running one of its calls resolves the same catalog from it.
    revision: tuple[int, str] | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: an agent of a tenant, with the keys and limits that admission of worker calls needs.

    ``tenant_pk``/``agent_pk`` are opaque here (``None`` where no database identity exists);
    ``worker_call_limits`` is the effective (tenant, agent) limit of concurrent worker calls, 0 = unlimited.
    """

    tenant: str
    agent_id: str
    tenant_pk: int | None = None  # the rows behind them (opaque here; worker calls and quotas use them)
    agent_pk: int | None = None
    worker_call_limits: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    """One tool as a server exposes it. ``target`` is opaque to the protocol; the runner interprets it."""

    name: str
    input_schema: Mapping[str, Any]
    description: str | None = None
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None
    icons: Sequence[Mapping[str, Any]] | None = None
    task_support: str = "forbidden"  # tasks extension: "forbidden", "optional" or "required"
    execution: str = "inline"  # "inline" (the serving process) or "worker" (a Celery task)
    timeout: float | None = None  # seconds a call may run (None: the WORKER_CALL_TIMEOUT_SECONDS setting)
    target: Any = None
    ref: int | None = None  # the catalog row it comes from (opaque here; grants select by it)
    # The tool's own rate limit (requests per second, burst; either None: the setting's), for the edge.
    rate_limit: tuple[float | None, int | None] | None = None

    def to_wire(self) -> dict[str, Any]:
        schema = dict(self.input_schema)
        schema.setdefault("type", "object")
        # Clients index into properties; a schema without any must still carry an empty object, never null.
        if not isinstance(schema.get("properties"), dict):
            schema["properties"] = {}
        wire: dict[str, Any] = {"name": self.name}
        if self.title:
            wire["title"] = self.title
        if self.description:
            wire["description"] = self.description
        wire["inputSchema"] = schema
        if self.output_schema:
            wire["outputSchema"] = dict(self.output_schema)
        if self.annotations:
            wire["annotations"] = dict(self.annotations)
        if self.icons:
            wire["icons"] = [dict(icon) for icon in self.icons]
        return wire


@dataclass(frozen=True, slots=True)
class ResourceDescriptor:
    """One resource, or one URI template of resources (``is_template``), as a server exposes it."""

    uri: str
    name: str
    is_template: bool = False
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    annotations: Mapping[str, Any] | None = None
    pattern: re.Pattern[str] | None = None
    target: Any = None
    ref: int | None = None  # the catalog row it comes from (opaque here; grants select by it)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"uriTemplate" if self.is_template else "uri": self.uri, "name": self.name}
        if self.title:
            wire["title"] = self.title
        if self.description:
            wire["description"] = self.description
        if self.mime_type:
            wire["mimeType"] = self.mime_type
        if self.annotations:
            wire["annotations"] = dict(self.annotations)
        return wire

    def match(self, uri: str) -> dict[str, str] | None:
        if self.pattern is None:
            return {} if uri == self.uri else None
        found = self.pattern.match(uri)
        return found.groupdict() if found else None


@dataclass(frozen=True, slots=True)
class PromptArgument:
    name: str
    description: str | None = None
    required: bool = False
    completions: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"name": self.name, "required": self.required}
        if self.description:
            wire["description"] = self.description
        return wire


@dataclass(frozen=True, slots=True)
class PromptDescriptor:
    """One prompt as a server exposes it."""

    name: str
    arguments: tuple[PromptArgument, ...] = ()
    title: str | None = None
    description: str | None = None
    target: Any = None
    ref: int | None = None  # the catalog row it comes from (opaque here; grants select by it)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"name": self.name}
        if self.title:
            wire["title"] = self.title
        if self.description:
            wire["description"] = self.description
        wire["arguments"] = [argument.to_wire() for argument in self.arguments]
        return wire

    def argument(self, name: str) -> PromptArgument | None:
        return next((argument for argument in self.arguments if argument.name == name), None)


def _index(items: Sequence[Any], key: Callable[[Any], str], kind: str) -> dict[str, Any]:
    index: dict[str, Any] = {}
    for item in items:
        if key(item) in index:
            raise ValueError(f"duplicate {kind} {key(item)!r} in one catalog")
        index[key(item)] = item
    return index


@dataclass(frozen=True)
class ServerCatalog:
    """The effective, ordered catalog of one server at one catalog version. Wire forms are computed once."""

    tools: Sequence[ToolDescriptor] = ()
    resources: Sequence[ResourceDescriptor] = ()
    templates: Sequence[ResourceDescriptor] = ()
    prompts: Sequence[PromptDescriptor] = ()
    # When this is one agent's view (its grant) of a server's catalog: the whole catalog, to tell entries the
    # view withholds (their tasks and update notifications are hidden too) from names that do not exist at all.
    unrestricted: ServerCatalog | None = field(default=None, repr=False, compare=False)
    _tools: dict[str, ToolDescriptor] = field(init=False, repr=False)
    _resources: dict[str, ResourceDescriptor] = field(init=False, repr=False)
    _prompts: dict[str, PromptDescriptor] = field(init=False, repr=False)
    _wire: dict[str, list[dict[str, Any]]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tools", _index(self.tools, lambda item: item.name, "tool name"))
        object.__setattr__(self, "_resources", _index(self.resources, lambda item: item.uri, "resource URI"))
        object.__setattr__(self, "_prompts", _index(self.prompts, lambda item: item.name, "prompt name"))
        _index(self.templates, lambda item: item.uri, "URI template")
        object.__setattr__(
            self,
            "_wire",
            {
                "tools": [tool.to_wire() for tool in self.tools],
                "resources": [resource.to_wire() for resource in self.resources],
                "resourceTemplates": [template.to_wire() for template in self.templates],
                "prompts": [prompt.to_wire() for prompt in self.prompts],
            },
        )

    def tool(self, name: str) -> ToolDescriptor | None:
        return self._tools.get(name)

    def prompt(self, name: str) -> PromptDescriptor | None:
        return self._prompts.get(name)

    def withholds_tool(self, name: str) -> bool:
        """Whether the server has this tool but this view leaves it out."""
        return self.unrestricted is not None and self.tool(name) is None and self.unrestricted.tool(name) is not None

    def withholds_resource(self, uri: str) -> bool:
        """Whether the server has a resource (or template) for ``uri`` but this view leaves it out."""
        if self.unrestricted is None or self.find_resource(uri) is not None:
            return False
        return self.unrestricted.find_resource(uri) is not None

    def find_resource(self, uri: str) -> tuple[ResourceDescriptor, dict[str, str]] | None:
        """The resource with this URI, else the first template that matches it, with the template's variables."""
        exact = self._resources.get(uri)
        if exact is not None:
            return exact, {}
        for template in self.templates:
            variables = template.match(uri)
            if variables is not None:
                return template, variables
        return None

    def template(self, uri_template: str) -> ResourceDescriptor | None:
        return next((template for template in self.templates if template.uri == uri_template), None)

    def wire(self, kind: str) -> list[dict[str, Any]]:
        return self._wire[kind]

    def tools_wire(self) -> list[dict[str, Any]]:
        return self._wire["tools"]

    def tools_wire_with_execution(self) -> list[dict[str, Any]]:
        """2025-11-25 with tasks: each task-capable tool also carries ``execution.taskSupport``."""
        wire = self._wire.get("tools+execution")
        if wire is None:
            wire = []
            for tool, entry in zip(self.tools, self._wire["tools"], strict=True):
                execution = tool_execution(tool.task_support)
                wire.append({**entry, "execution": execution} if execution is not None else entry)
            self._wire["tools+execution"] = wire
        return wire


class InvalidToolArguments(Exception):
    """Raised by a runner when arguments do not satisfy the tool's input schema.

    Not a ``ProtocolError``: whether it becomes -32602 or an ``isError`` result depends on the revision.
    """


class ProgressReporter:
    """Sends ``notifications/progress`` for one request, if and only if the client asked with a token."""

    def __init__(self, token: str | int | None, emit: Emit) -> None:
        self.token = token
        self._emit = emit
        self._last: float | None = None

    @property
    def enabled(self) -> bool:
        return self.token is not None

    async def report(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.token is None:
            return
        # The spec requires progress to increase with each notification; stale values are dropped.
        if self._last is not None and progress <= self._last:
            return
        self._last = progress
        params: dict[str, Any] = {"progressToken": self.token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._emit({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})


LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class LogReporter:
    """Sends ``notifications/message`` at or above the level the client asked for (``None``: send nothing)."""

    def __init__(self, threshold: str | None, emit: Emit) -> None:
        self.threshold = threshold
        self._emit = emit

    def allows(self, level: str) -> bool:
        if self.threshold is None or level not in LOG_LEVELS:
            return False
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.threshold)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}")
        if not self.allows(level):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self._emit({"jsonrpc": "2.0", "method": "notifications/message", "params": params})


@dataclass(slots=True)
class CallContext:
    """The context of one call a runner serves (``tools/call``, ``resources/read``, ``prompts/get``): what it gets
    besides the arguments: who calls, how to report back, and (2026-07-28 multi-round trips) the client's answers
    to earlier input requests with the state the server handed out.

    Not the audit log's ``ToolCall`` (``mcp_app.models``), the row a finished ``tools/call`` leaves behind."""

    request: RequestContext
    progress: ProgressReporter
    log: LogReporter
    input_responses: Mapping[str, Any] | None = None
    request_state: str | None = None
    # True when running as (or as a candidate for) a durable task: never turned into a task again.
    in_task: bool = False
    # The JSON-RPC id and ``_meta`` of the request (worker calls record the id and read an idempotency key).
    request_id: str | int | None = None
    meta: Mapping[str, Any] | None = None
    # The durable record (``ToolTask.task_id``) this call already has, e.g. a task resumed by ``tasks/update``:
    # a worker call runs as that record instead of creating one.
    task_id: str | None = None
    # Cooperative cancellation: whether the call was cancelled (set by the worker runner; inline calls are
    # cancelled by cancelling their coroutine).
    cancelled: Callable[[], bool] | None = None

    @property
    def outbound(self) -> Outbound:
        """The request's back-channel (server-to-client requests); ``NO_CHANNEL`` where there is none."""
        return self.request.outbound


class ToolRunner(Protocol):
    """Runs what a catalog entry points at. Implementations live in the runtime layer."""

    async def call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """Run ``tool`` and return a wire ``CallToolResult``; raise ``InvalidToolArguments`` on bad input."""
        ...

    async def read_resource(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        """Return a wire ``ReadResourceResult`` for ``uri`` (``variables`` filled from a template)."""
        ...

    async def get_prompt(
        self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        """Return a wire ``GetPromptResult`` (or an input-required result)."""
        ...


class Session(Protocol):
    """A handshake-era session as the handlers see it: its negotiated state and the verbs that change it."""

    key: str
    protocol_version: str
    log_level: str | None
    subscriptions: frozenset[str]

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        """What the client declared in its ``initialize``."""
        ...

    async def set_log_level(self, level: str) -> None: ...

    async def subscribe(self, uri: str) -> None: ...

    async def unsubscribe(self, uri: str) -> None: ...


class Tasks(Protocol):
    """The caller's durable tasks (2026-07-28 tasks extension); every verb is scoped to the calling agent."""

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The task as ``tasks/get`` shows it, or ``None`` if the caller has no such task."""
        ...

    async def update(self, task_id: str, responses: Mapping[str, Any]) -> bool:
        """Record answers to outstanding input requests (resuming the task once all are in)."""
        ...

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that is not terminal yet (a terminal one is left as it is)."""
        ...


class HandshakeTasks(Protocol):
    """The caller's 2025-11-25 experimental tasks (``handshake_tasks``); every verb is scoped to the calling agent
    on this server (and to the token's grant), so another agent's or tenant's task id is unknown (``None``)."""

    async def start(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        call: CallContext,
        *,
        ttl_ms: int | None,
        request_id: str | int,
    ) -> dict[str, Any]:
        """Store a ``working`` task, start the call in the background, return the ``CreateTaskResult``."""
        ...

    async def get(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        """The ``Task`` object, or ``None`` for an unknown task."""
        ...

    async def result(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        """Wait until the task is terminal, then its result (with related-task ``_meta``); raises the
        ``ProtocolError`` the call ended with. ``None`` for an unknown task."""
        ...

    async def list(self, ctx: RequestContext, cursor: Any) -> dict[str, Any]:
        """``{tasks, nextCursor?}``: the caller's tasks, newest first, ``ctx.page_size`` at a time."""
        ...

    async def cancel(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        """Cancel a task that is not terminal (raises -32602 for a terminal one); the cancelled ``Task``."""
        ...


class CallAudit(Protocol):
    """Records each ``tools/call`` with its outcome; implementations must not block (the runtime buffers)."""

    def record_call(
        self,
        params: Mapping[str, Any],
        request_id: str | int,
        started: float,
        *,
        result: Mapping[str, Any] | None = None,
        error_code: int | None = None,
        error_message: str = "",
        cancelled: bool = False,
    ) -> None: ...


class RequestTracer(Protocol):
    """Traces each JSON-RPC request the dispatcher answers (``observability.tracing`` implements it); a context
    without one (``None``) is not traced and pays nothing."""

    async def trace(
        self,
        method: str,
        request_id: str | int,
        params: Any,
        ctx: RequestContext,
        answer: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Return ``await answer()``, traced as ``method`` (``params._meta`` may carry the caller's trace)."""
        ...


@dataclass(slots=True)
class RequestContext:
    """Everything the handlers need for one HTTP request."""

    server: ServerDescription
    catalog: ServerCatalog
    runner: ToolRunner
    protocol_version: str
    era: str = LEGACY
    principal: Principal | None = None
    emit: Emit = discard
    headers: Mapping[str, str] = field(default_factory=dict)
    client_info: Mapping[str, Any] | None = None
    client_capabilities: Mapping[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    cache_ttl_ms: int = 0
    page_size: int = 100
    max_echoed_bytes: int = 1024  # the largest request id or progress token echoed back (see ``dispatcher``)
    session: Session | None = None
    # The back-channel to the client (server-to-client requests, their answers, cancellation, SEP-1699).
    outbound: Outbound = NO_CHANNEL
    tasks: Tasks | None = None
    handshake_tasks: HandshakeTasks | None = None  # 2025-11-25 experimental tasks (handshake era only)
    audit: CallAudit | None = None
    tracer: RequestTracer | None = None  # None: tracing is off

    def client_declares(self, capability: str) -> bool:
        return isinstance(self.client_capabilities.get(capability), dict)

    def client_declares_extension(self, extension: str) -> bool:
        extensions = self.client_capabilities.get("extensions")
        return isinstance(extensions, dict) and extension in extensions


@dataclass(frozen=True, slots=True)
class OpenStream:
    """A handler's answer that is not a response but a long-lived SSE stream (``subscriptions/listen``).

    The transport sends ``first`` at once, then forwards each cross-process event that ``translate`` turns into
    a message, until the client goes away.
    """

    first: tuple[dict[str, Any], ...]
    translate: Callable[[dict[str, Any]], dict[str, Any] | None]
