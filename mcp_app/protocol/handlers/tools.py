"""``tools/list`` and ``tools/call``.

A malformed request or an unknown tool is -32602; so is an argument-validation failure, except in 2025-11-25,
where it is an ``isError`` result (``versions.tool_input_errors_in_result``). In the stateless era, arguments
annotated ``x-mcp-header`` must be mirrored by ``Mcp-Param-*`` headers (-32020). 2025-11-25 tasks: ``tools/list``
shows ``execution.taskSupport``, a ``tools/call`` with ``params.task`` on a task-capable tool answers ``{task}`` at
once; ``task`` on a ``forbidden`` tool, or a ``required`` tool called without it, is -32601. A tool that requires
approval is called through the ``Approvals`` port once its arguments are known (docs/approvals.md).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from .. import handshake_tasks, messages, modern, versions
from ..context import InvalidToolArguments, RequestContext
from ..dispatcher import MessageContext
from ..errors import INTERNAL_ERROR, InvalidParams, MethodNotFound, MissingRequiredClientCapability, ProtocolError
from .base import catalog_page, dispatcher, required_string


@dispatcher.request("tools/list")
async def list_tools(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    ctx = message.request
    if _serves_tasks(ctx):
        return catalog_page(message, params, "tools", ctx.catalog.tools_wire_with_execution())
    return catalog_page(message, params, "tools")


def _serves_tasks(ctx: RequestContext) -> bool:
    """2025-11-25 experimental tasks: that revision, in the handshake era, with a task service."""
    return (
        ctx.era == versions.LEGACY and ctx.handshake_tasks.available and handshake_tasks.has_tasks(ctx.protocol_version)
    )


@dispatcher.request("tools/call")
async def call_tool(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    """Every call is recorded with the request's audit port, whatever its outcome (errors included)."""
    record = functools.partial(message.request.audit.record_call, params, message.request_id, time.time())
    try:
        result = await _call_tool(params, message)
    except ProtocolError as exc:
        record(error_code=exc.code, error_message=exc.message)
        raise
    except asyncio.CancelledError:
        record(cancelled=True)
        raise
    except Exception:
        record(error_code=INTERNAL_ERROR, error_message="Internal error")
        raise
    record(result=result)
    return result


async def _call_tool(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    if not params:
        raise InvalidParams("Invalid params: tools/call requires params with a tool name")
    name = required_string(params, "name")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise InvalidParams('Invalid params: "arguments" must be an object')
    ctx = message.request
    tool = ctx.catalog.tool(name)
    if tool is None:
        raise InvalidParams(f"Unknown tool: {name}", data={"name": name})
    if ctx.era == versions.MODERN:
        modern.check_param_headers(tool.input_schema, arguments, ctx.headers)
        if tool.task_support == "required" and not ctx.client_declares_extension(modern.TASKS_EXTENSION):
            raise MissingRequiredClientCapability(
                {"extensions": {modern.TASKS_EXTENSION: {}}},
                f"Tool {name} runs as a task: declare the {modern.TASKS_EXTENSION} extension",
            )
    as_task, ttl_ms = handshake_tasks.requested_ttl(params) if _serves_tasks(ctx) else (False, None)
    if _serves_tasks(ctx):
        # 2025-11-25 tool-level negotiation: -32601 for a task on a forbidden tool, and without one on a required one.
        if as_task and tool.task_support not in ("optional", "required"):
            raise MethodNotFound(f"Tool {name} does not support task-augmented execution", data={"name": name})
        if not as_task and tool.task_support == "required":
            raise MethodNotFound(
                f"Tool {name} requires task augmentation: send tools/call with params.task", data={"name": name}
            )
    call = message.call(params)
    if tool.requires_approval:  # decided at resolution: the other tools' calls pay nothing for the gate
        try:
            return await ctx.approvals.call(
                tool, arguments, call, handshake_task=as_task, ttl_ms=ttl_ms, request_id=message.request_id
            )
        except InvalidToolArguments as exc:
            return _invalid_arguments(ctx, name, exc)
    if as_task:
        return await ctx.handshake_tasks.start(tool, arguments, call, ttl_ms=ttl_ms, request_id=message.request_id)
    try:
        return await ctx.runner.call_tool(tool, arguments, call)
    except InvalidToolArguments as exc:
        return _invalid_arguments(ctx, name, exc)


def _invalid_arguments(ctx: RequestContext, name: str, exc: InvalidToolArguments) -> dict[str, Any]:
    text = f"Invalid arguments for tool {name}: {exc}"
    if versions.tool_input_errors_in_result(ctx.protocol_version):
        return messages.failed_call(text)
    raise InvalidParams(text, data={"name": name}) from exc
