"""Invoking a registered tool function: a coroutine in the event loop, a sync one in a worker thread with Django's
connection hygiene (``run_sync``), with its ``ToolContext`` (``tool_context``); in the handshake era its input
requests are asked in band (``answer_in_band``).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import SyncToAsync
from django.db import close_old_connections

from ..definitions.context import InputRequired, ToolContext, ToolError
from ..definitions.registry import RegisteredFunction, RegisteredTool
from ..protocol.context import CallContext


def _in_worker_thread(function: Any, kwargs: dict[str, Any]) -> Any:
    close_old_connections()
    try:
        return function(**kwargs)
    finally:
        close_old_connections()


# One wrapper for every call: building a SyncToAsync per call costs measurable CPU (docs/performance.md). Its
# __call__ keeps no state on the instance.
_in_a_worker_thread = SyncToAsync(_in_worker_thread, thread_sensitive=False)


async def run_sync(function: Any, **kwargs: Any) -> Any:
    """Run a sync tool in a worker thread with ``close_old_connections`` before and after, as a request handler would:
    the thread's connections may have outlived ``CONN_MAX_AGE`` or broken since it last ran a tool."""
    return await _in_a_worker_thread(function, kwargs)


async def run_tool(registered: RegisteredTool | RegisteredFunction, kwargs: dict[str, Any]) -> Any:
    if registered.is_coroutine:
        return await registered.function(**kwargs)
    if isinstance(registered, RegisteredTool) and not registered.blocking:
        return registered.function(**kwargs)  # declared never to block: no thread hop
    return await run_sync(registered.function, **kwargs)


async def answer_in_band(
    registered: RegisteredTool, kwargs: dict[str, Any], call: CallContext, needed: InputRequired
) -> dict[str, Any]:
    """Ask the client each of ``needed``'s requests; return the tool's arguments for the next round."""
    context = kwargs.get(registered.context_parameter) if registered.context_parameter else None
    if not isinstance(context, ToolContext):
        raise ToolError(f"Tool {registered.name} asked for input but takes no ToolContext to receive it")
    answers: dict[str, Any] = {}
    for key, request in needed.requests.items():
        answers[key] = await context.request(str(request.get("method")), dict(request.get("params") or {}))
    context.input_responses = answers
    context.state = needed.state
    return kwargs


def tool_context(call: CallContext, state: Any) -> ToolContext:
    principal = call.request.principal
    return ToolContext(
        server_id=call.request.server.server_id,
        tenant=principal.tenant if principal else None,
        agent_id=principal.agent_id if principal else None,
        _progress=call.progress,
        _log=call.log,
        input_responses=dict(call.input_responses or {}),
        state=state,
        client_capabilities=dict(call.request.client_capabilities),
        _outbound=call.outbound,
        _cancelled=call.cancelled,
    )


async def invoke(
    registered: RegisteredTool | RegisteredFunction, kwargs: dict[str, Any], call: CallContext, state: Any
) -> Any:
    """Run ``registered`` with ``kwargs`` and, if it takes one, a ``ToolContext`` of ``call`` (with ``state``)."""
    if registered.context_parameter:
        kwargs[registered.context_parameter] = tool_context(call, state)
    return await run_tool(registered, kwargs)
