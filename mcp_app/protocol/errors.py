"""JSON-RPC and MCP error codes, the ``ProtocolError`` hierarchy, and the one place errors become wire objects.

Handlers raise ``ProtocolError`` subclasses; ``error_response`` is the only function that serialises them. The
dispatcher turns any other exception into a sanitised ``INTERNAL_ERROR``: no traceback or text reaches a client.
"""

from __future__ import annotations

from typing import Any

# JSON-RPC 2.0
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# MCP, handshake era (2024-11-05 … 2025-11-25)
REQUEST_TIMEOUT = -32001
RESOURCE_NOT_FOUND = -32002
# mcp-host's own (implementation-defined). -32020…-32099 are reserved for the spec from 2026-07-28 on, and
# -32000…-32002 are taken by SDKs and earlier revisions, so it is -32010 in both eras.
WORKER_QUOTA_EXCEEDED = -32010
RATE_LIMITED = -32011  # HTTP 429 with Retry-After (mcp_app.limits.rates)
CAPACITY_EXCEEDED = -32012  # a cap of concurrent streams, sessions or tasks (mcp_app.limits.caps)
BUDGET_EXCEEDED = -32013  # HTTP 429 with Retry-After until the period resets (mcp_app.limits.budgets)
APPROVAL_PENDING = -32014  # HTTP 200: the call waits for a tenant admin's approval (docs/approvals.md)
# MCP 2026-07-28
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

JsonRpcId = str | int | None


class ProtocolError(Exception):
    """An error with a JSON-RPC code that is safe to show to the client."""

    code: int = INTERNAL_ERROR
    default_message: str = "Internal error"

    def __init__(self, message: str | None = None, data: Any = None, *, code: int | None = None) -> None:
        self.message = message or self.default_message
        self.data = data
        if code is not None:
            self.code = code
        super().__init__(self.message)

    def to_wire(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(ProtocolError):
    code = PARSE_ERROR
    default_message = "Parse error"


class InvalidRequest(ProtocolError):
    code = INVALID_REQUEST
    default_message = "Invalid Request"


class MethodNotFound(ProtocolError):
    code = METHOD_NOT_FOUND
    default_message = "Method not found"


class InvalidParams(ProtocolError):
    code = INVALID_PARAMS
    default_message = "Invalid params"


class InternalError(ProtocolError):
    code = INTERNAL_ERROR
    default_message = "Internal error"


class RequestTimeout(ProtocolError):
    """The client did not answer a server-to-client request (sampling, elicitation, roots) in time."""

    code = REQUEST_TIMEOUT
    default_message = "Request timed out"


class ServiceUnavailable(ProtocolError):
    """A backing service (the channel layer, the event store) is unreachable: retry later (HTTP 503 with
    ``Retry-After: retry_after_seconds``)."""

    code = INTERNAL_ERROR
    default_message = "Service unavailable: the channel layer is unreachable; retry shortly"
    dependency = "channel_layer"
    retry_after_seconds = 1


class DatabaseUnavailable(ServiceUnavailable):
    """The database refused, failed or did not answer in time (``mcp_app.database``): HTTP 503 as well."""

    default_message = "Service unavailable: the database is unreachable; retry shortly"
    dependency = "database"
    retry_after_seconds = 2


class QuotaExceeded(ProtocolError):
    """A worker call refused: its tenant or its agent (``scope``) already runs as many worker calls as it may
    (``limit``). HTTP 200 in both eras (it is the answer of one call, not a malformed request); the client retries
    when one of its calls has finished."""

    code = WORKER_QUOTA_EXCEEDED
    default_message = "Too many concurrent worker calls"

    def __init__(self, scope: str, limit: int) -> None:
        self.scope = scope
        self.limit = limit
        super().__init__(
            f"Too many concurrent worker calls: this {scope} may run at most {limit} at once; "
            "retry when one of them has finished",
            {"scope": scope, "limit": limit},
        )


class RateLimited(ProtocolError):
    """A request over its tenant's, agent's or tool's rate (``mcp_app.limits.rates``): HTTP 429 with
    ``Retry-After`` in both eras. ``data``: ``scope`` ("tenant", "agent" or "tool"), ``retryAfterMs``, and the
    limit (``rate`` per second, ``burst``)."""

    code = RATE_LIMITED
    default_message = "Rate limit exceeded"

    def __init__(self, scope: str, retry_after_ms: int, rate: float, burst: int) -> None:
        self.scope = scope
        self.retry_after_ms = retry_after_ms
        super().__init__(
            f"Rate limit exceeded: this {scope} may send {rate:g} requests per second (bursts of {burst}); "
            f"retry in {retry_after_ms} ms",
            {"scope": scope, "retryAfterMs": retry_after_ms, "rate": rate, "burst": burst},
        )

    @property
    def retry_after_seconds(self) -> int:
        """The ``Retry-After`` header's value: whole seconds, rounded up."""
        return max(1, -(-self.retry_after_ms // 1000))


class BudgetExceeded(ProtocolError):
    """A ``tools/call`` over a budget of its tenant or agent (``mcp_app.limits.budgets``, docs/budgets.md): HTTP 429
    with ``Retry-After`` = seconds until the period resets, in both eras. ``data``: ``scope`` ("tenant" or
    "agent"), ``metric`` ("calls", "tool_seconds" or "cost"), ``period`` ("day" or "month"), ``budget`` (the
    limit), ``used`` and ``resetsAt`` (ISO-8601)."""

    code = BUDGET_EXCEEDED
    default_message = "Budget exceeded"

    def __init__(
        self, scope: str, metric: str, period: str, budget: float, used: float, resets_at: str, retry_after: int
    ) -> None:
        self.scope = scope
        self.retry_after_seconds = max(1, retry_after)
        shown = {"budget": json_number(budget), "used": json_number(used)}
        super().__init__(
            f"Budget exceeded: this {scope} has used {shown['used']} of its {metric.replace('_', '-')} budget of "
            f"{shown['budget']} per {period}; it resets at {resets_at}",
            {"scope": scope, "metric": metric, "period": period, **shown, "resetsAt": resets_at},
        )


def json_number(value: float) -> float | int:
    """A whole number as an int (calls), else rounded to 6 places (tool-seconds, cost)."""
    return int(value) if float(value).is_integer() else round(value, 6)


class CapacityExceeded(ProtocolError):
    """A new stream, session or task over a cap of its tenant or agent, or a process short of file descriptors
    (``mcp_app.limits.caps``). ``data``: ``resource``, ``scope`` ("tenant", "agent" or "process") and ``limit``.
    Before a response starts, the edge answers 429 (a cap of the caller) or 503 (the process), with
    ``Retry-After``."""

    code = CAPACITY_EXCEEDED
    default_message = "Too many concurrent streams"

    def __init__(self, resource: str, scope: str, limit: int) -> None:
        self.resource = resource
        self.scope = scope
        self.limit = limit
        if scope == "process":
            message = f"Service unavailable: this server process cannot open more {resource} now; retry shortly"
        else:
            message = f"Too many concurrent {resource}: this {scope} may hold at most {limit} at once"
        super().__init__(message, {"resource": resource, "scope": scope, "limit": limit})


class ApprovalPending(ProtocolError):
    """A call of a tool that requires approval, whose approval a tenant admin has not given yet (docs/approvals.md):
    HTTP 200 in both eras. ``data``: ``approvalId``, ``expiresAt`` (ISO 8601) and, when the call is parked as a
    task, ``taskId``. Re-issued with the same arguments once approved, the call runs."""

    code = APPROVAL_PENDING
    default_message = "Waiting for approval"

    def __init__(self, tool: str, approval_id: int, expires_at: str, task_id: str | None = None) -> None:
        self.approval_id = approval_id
        super().__init__(
            f"Tool {tool} requires a tenant admin's approval of this call (approval {approval_id}, pending until "
            f"{expires_at}); re-issue the same call once it is approved",
            {"approvalId": approval_id, "expiresAt": expires_at, **({"taskId": task_id} if task_id else {})},
        )


class HeaderMismatch(ProtocolError):
    """2026-07-28: a required routing header is missing, invalid, or disagrees with the body."""

    code = HEADER_MISMATCH
    default_message = "Header mismatch"


class MissingRequiredClientCapability(ProtocolError):
    """2026-07-28: the request needs a client capability the client did not declare."""

    code = MISSING_REQUIRED_CLIENT_CAPABILITY
    default_message = "Missing required client capability"

    def __init__(self, required: dict[str, Any], message: str | None = None) -> None:
        super().__init__(message, {"requiredCapabilities": required})


class UnsupportedProtocolVersion(ProtocolError):
    """2026-07-28: the requested protocol version is not one this server speaks."""

    code = UNSUPPORTED_PROTOCOL_VERSION
    default_message = "Unsupported protocol version"

    def __init__(self, requested: Any, supported: list[str]) -> None:
        super().__init__(
            f"Unsupported protocol version {requested!r}; supported: {', '.join(supported)}",
            {"requested": requested, "supported": supported},
        )


def error_response(request_id: JsonRpcId, error: ProtocolError) -> dict[str, Any]:
    """The JSON-RPC error response object for ``error``; the single serialisation point for errors."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()}
