"""What a handler knows about the request it serves (``RequestContext``), what a runner knows about one call
(``CallContext``), and the ports whose signatures take them (``ToolRunner``, which refuses arguments with
``InvalidToolArguments``; ``HandshakeTasks``; ``Approvals``; ``RequestTracer``; ``UsageMeter``, told what each call spent). ``OpenStream`` is a handler's answer that
opens a stream instead of responding. Nothing here touches a database: implementations are injected.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .descriptors import PromptDescriptor, ResourceDescriptor, ServerCatalog, ServerDescription, ToolDescriptor
from .errors import InvalidRequest, MethodNotFound
from .ports import NO_AUDIT, NO_CHANNEL, NO_TASKS, CallAudit, Outbound, Session, Tasks
from .reporters import Emit, LogReporter, ProgressReporter, discard
from .versions import LEGACY


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: an agent of a tenant, with the keys and limits that admission of worker calls needs."""

    tenant: str
    agent_id: str
    # The rows behind them: opaque here (worker calls and quotas use them); None where there is none.
    tenant_pk: int | None = None
    agent_pk: int | None = None
    worker_call_limits: tuple[int, int] = (0, 0)  # concurrent worker calls of (tenant, agent); 0: unlimited
    time_zone: str = "UTC"  # the tenant's IANA zone: whose day a call's usage counts in (docs/budgets.md)


@dataclass(slots=True)
class CallContext:
    """The context of one call a runner serves (``tools/call``, ``resources/read``, ``prompts/get``) besides its
    arguments: who calls, how to report back, and (2026-07-28 multi-round trips) the client's answers to earlier
    input requests with the state the server handed out. Not the audit log's ``ToolCall`` (``mcp_app.models``)."""

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


class UsageMeter(Protocol):
    """Told once what each tool call spent, by the runner where the tool ran, when it ended (``failed``: a
    JSON-RPC error or a cancellation; ``result``: what it returned, if it did). Must not block or raise."""

    def measured(
        self,
        tool: ToolDescriptor,
        arguments: Mapping[str, Any],
        call: CallContext,
        result: Mapping[str, Any] | None,
        *,
        failed: bool,
        seconds: float,
    ) -> None: ...


class NoMeter:
    """The ``UsageMeter`` of requests whose calls are not metered (contexts built without one, e.g. in tests)."""

    def measured(self, *_call: Any, **_measures: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "NO_METER"


NO_METER: UsageMeter = NoMeter()


class InvalidToolArguments(Exception):
    """Raised by a runner when arguments do not satisfy the tool's input schema. Not a ``ProtocolError``: whether it
    becomes -32602 or an ``isError`` result depends on the revision."""


class ToolRunner(Protocol):
    """Runs what a catalog entry points at. Implementations live in the runtime layer."""

    async def call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """Run ``tool`` and return a wire ``CallToolResult``; raise ``InvalidToolArguments`` on bad input."""

    async def read_resource(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        """Return a wire ``ReadResourceResult`` for ``uri`` (``variables`` filled from a template)."""

    async def get_prompt(
        self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        """Return a wire ``GetPromptResult`` (or an input-required result)."""


class HandshakeTasks(Protocol):
    """The caller's 2025-11-25 experimental tasks (``handshake_tasks``); every verb is scoped to the calling agent
    on this server (and to the token's grant), so another agent's or tenant's task id is unknown (``None``)."""

    @property
    def available(self) -> bool:
        """``False``: no 2025-11-25 tasks are served here (``NO_HANDSHAKE_TASKS``): the capability is not
        advertised and the ``tasks/*`` methods are not found."""

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

    async def get(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        """The ``Task`` object, or ``None`` for an unknown task."""

    async def result(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        """Wait until the task is terminal, then its result (with related-task ``_meta``); raises the
        ``ProtocolError`` the call ended with. ``None`` for an unknown task."""

    async def list(self, ctx: RequestContext, cursor: Any) -> dict[str, Any]:
        """``{tasks, nextCursor?}``: the caller's tasks, newest first, ``ctx.page_size`` at a time."""

    async def cancel(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        """Cancel a task that is not terminal (raises -32602 for a terminal one); the cancelled ``Task``."""


class NoHandshakeTasks:
    """The ``HandshakeTasks`` port of requests that serve no 2025-11-25 tasks (the stateless era, the console)."""

    available = False

    async def start(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        call: CallContext,
        *,
        ttl_ms: int | None,
        request_id: str | int,
    ) -> dict[str, Any]:
        raise MethodNotFound("Method not found: tasks are not served here")

    async def get(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        return None

    async def result(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        return None

    async def list(self, ctx: RequestContext, cursor: Any) -> dict[str, Any]:
        return {"tasks": []}

    async def cancel(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        return None

    def __repr__(self) -> str:
        return "NO_HANDSHAKE_TASKS"


NO_HANDSHAKE_TASKS: HandshakeTasks = NoHandshakeTasks()


class Approvals(Protocol):
    """Calls of tools that require a tenant admin's approval (``ToolDescriptor.requires_approval``; the runtime's
    ``approvals``, docs/approvals.md): a call runs once approved (the approval is used up), else it is parked as a
    task (a client that can take one) or waits a bounded time and is refused with ``ApprovalPending``."""

    async def call(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        call: CallContext,
        *,
        handshake_task: bool,
        ttl_ms: int | None,
        request_id: str | int,
    ) -> dict[str, Any]:
        """The call's answer (a result, a task), after its approval; ``handshake_task``: a 2025-11-25 call with
        ``params.task`` (``ttl_ms`` asked for). Raises ``InvalidToolArguments`` before anything is asked."""


class NoApprovals:
    """The ``Approvals`` port of requests that cannot ask for approval (the admin's console): such tools refuse."""

    async def call(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        call: CallContext,
        *,
        handshake_task: bool,
        ttl_ms: int | None,
        request_id: str | int,
    ) -> dict[str, Any]:
        raise InvalidRequest(f"Tool {tool.name} requires a tenant admin's approval, which cannot be asked for here")

    def __repr__(self) -> str:
        return "NO_APPROVALS"


NO_APPROVALS: Approvals = NoApprovals()


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


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Everything the handlers need for one HTTP request. Frozen: a handler or runner that needs a variant (another
    log level, another emit) makes one with ``dataclasses.replace``."""

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
    page_bytes: int | None = None  # a list page also ends before its items pass this many bytes (``pagination``)
    max_echoed_bytes: int = 1024  # the largest request id or progress token echoed back (see ``dispatcher``)
    session: Session | None = None
    # The back-channel to the client (server-to-client requests, their answers, cancellation, SEP-1699).
    outbound: Outbound = NO_CHANNEL
    tasks: Tasks = NO_TASKS
    handshake_tasks: HandshakeTasks = NO_HANDSHAKE_TASKS  # 2025-11-25 experimental tasks (handshake era only)
    approvals: Approvals = NO_APPROVALS  # calls of tools that require approval (``ToolDescriptor.requires_approval``)
    audit: CallAudit = NO_AUDIT
    meter: UsageMeter = NO_METER  # what each tools/call spent (``mcp_app.limits.metering``)
    tracer: RequestTracer | None = None  # None: tracing is off

    def client_declares(self, capability: str) -> bool:
        return isinstance(self.client_capabilities.get(capability), dict)

    def client_declares_extension(self, extension: str) -> bool:
        extensions = self.client_capabilities.get("extensions")
        return isinstance(extensions, dict) and extension in extensions


@dataclass(frozen=True, slots=True)
class OpenStream:
    """A handler's answer that opens a long-lived SSE stream (``subscriptions/listen``): the transport sends ``first``
    at once, then each cross-process event that ``translate`` turns into a message, until the client goes away."""

    first: tuple[dict[str, Any], ...]
    translate: Callable[[dict[str, Any]], dict[str, Any] | None]
