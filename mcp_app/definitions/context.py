"""The objects tool authors touch: ``ToolContext``, ``ToolError``, ``ToolResult`` and ``InputRequired``; and
``error_result``, the ``isError`` result every kind of tool fails with (``CodedFailure``: a webhook's or an
upstream's failure on its way to one); ``CONTENT_BLOCK_FIELDS``, the content block types; ``REQUIRED_CAPABILITY``,
the client capability each input request needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..protocol.ports import NO_CHANNEL, Outbound
from ..protocol.reporters import LogReporter, ProgressReporter


class ToolError(Exception):
    """Raised by a tool to refuse or fail with a message the client sees, as an ``isError`` result.

    ``code`` and ``error_type`` are stable, machine-readable identifiers; the result carries them, with the
    message, as a JSON text block after the human-readable one, so programs can branch without parsing prose.
    """

    def __init__(self, message: str, *, code: str = "TOOL_ERROR", error_type: str = "tool_error") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.error_type = error_type


class CodedFailure(Exception):
    """A call to a webhook or an upstream failed: ``code`` for programs, ``message`` for the model (the caller
    makes them its ``error_result``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def error_result(message: str, code: str, error_type: str) -> dict[str, Any]:
    """An ``isError`` result: a sentence for the model, then ``{code, message, error_type}`` for programs."""
    detail = orjson.dumps({"code": code, "message": message, "error_type": error_type}).decode()
    return {"content": [{"type": "text", "text": message}, {"type": "text", "text": detail}], "isError": True}


# The content block types of results and prompt messages, and the string fields each needs.
CONTENT_BLOCK_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "image": ("data", "mimeType"),
    "audio": ("data", "mimeType"),
    "resource": (),
    "resource_link": ("uri", "name"),
}

# Which client capability each kind of server-to-client (input) request needs.
REQUIRED_CAPABILITY = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}


@dataclass
class ToolResult:
    """An explicit ``CallToolResult``: content blocks, optional structured content, optional error flag, optional
    ``_meta`` (e.g. ``{"io.mcp-host/cost": 0.02}``: what this call cost beyond the tool's price, docs/budgets.md)."""

    content: Sequence[dict[str, Any]] = ()
    structured_content: Any = None
    is_error: bool = False
    meta: Mapping[str, Any] | None = None


@dataclass
class InputRequired:
    """Returned by a tool that needs the client's input first (2026-07-28 multi-round-trip requests).

    ``requests`` maps ids of the tool's choosing to server-to-client requests, e.g.
    ``{"confirm": {"method": "elicitation/create", "params": {...}}}``. ``state`` is any JSON value the tool
    wants back on the retry; the server signs it, so the tool can trust what ``ToolContext.state`` returns.
    """

    requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    state: Any = None
    # Tasks extension: ask as a durable task parked in ``input_required`` (answered with ``tasks/update``)
    # rather than synchronously before any task exists (the default).
    park: bool = False


@dataclass
class ToolContext:
    """What a running tool knows about its call, and how it reports back."""

    server_id: str
    tenant: str | None
    agent_id: str | None
    _progress: ProgressReporter = field(repr=False)
    _log: LogReporter = field(repr=False)
    input_responses: Mapping[str, Any] = field(default_factory=dict)
    state: Any = None
    client_capabilities: Mapping[str, Any] = field(default_factory=dict)
    _outbound: Outbound = field(default=NO_CHANNEL, repr=False)
    _cancelled: Callable[[], bool] | None = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        """Whether the call was cancelled (``notifications/cancelled``, ``tasks/cancel``, the admin, a closed
        stream). Long tools check it between steps and stop: on a worker the tool's thread cannot be interrupted,
        so this is how a sync tool stops early; an async tool is also cancelled at its next ``await``."""
        return self._cancelled is not None and self._cancelled()

    def client_supports(self, capability: str) -> bool:
        """Whether the client declared ``capability`` (``sampling``, ``elicitation``, ``roots``)."""
        return isinstance(self.client_capabilities.get(capability), dict)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a server-to-client request during this call and return the client's result.

        Handshake era, on a session whose client declared the capability: the request goes out on this call's
        SSE stream and the answer may arrive at any process. The stateless revision has no such requests: tools
        there return ``InputRequired`` instead. Failures raise ``ClientRequestError`` (an ``isError`` result).
        """
        capability = REQUIRED_CAPABILITY.get(method)
        if capability is not None and not self.client_supports(capability):
            raise ClientRequestError(f"The client does not support {capability}.")
        if not self._outbound.can_request:
            raise ClientRequestError(
                f"{method} needs a handshake-era session (Mcp-Session-Id); stateless clients answer InputRequired."
            )
        answer = await self._outbound.request(method, params)
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise ClientRequestError(f"The client refused {method}: {error.get('message', 'error')}")
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    async def close_stream(self) -> bool:
        """End this call's SSE response now, before the result (SEP-1699, 2025-11-25 sessions): the call goes on,
        and the client gets the rest by resuming with ``Last-Event-ID``. Returns whether the stream was closed
        (``False`` where the response cannot be resumed: no session, or the stateless revision)."""
        return await self._outbound.close_stream()

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]:
        """Ask the user for structured input; returns ``{"action": "accept"|"decline"|"cancel", "content"?}``."""
        return await self.request("elicitation/create", {"message": message, "requestedSchema": requested_schema})

    async def sample(self, messages: list[dict[str, Any]], max_tokens: int, **params: Any) -> dict[str, Any]:
        """Ask the client's model for a completion; returns the ``CreateMessageResult``."""
        return await self.request("sampling/createMessage", {"messages": messages, "maxTokens": max_tokens, **params})

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` if the client asked for progress; otherwise do nothing."""
        await self._progress.report(progress, total, message)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send ``notifications/message`` if the client asked for messages at this level; otherwise nothing."""
        await self._log.log(level, data, logger)


class ClientRequestError(ToolError):
    """The client answered a server-to-client request with an error, or could not be asked."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="CLIENT_REQUEST_FAILED", error_type="client_error")
