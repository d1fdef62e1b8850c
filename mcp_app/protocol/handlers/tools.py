"""``tools/list`` and ``tools/call``.

Protocol errors (-32602) are for a malformed request or an unknown tool. Argument-validation failures are
-32602 before 2025-11-25 and an ``isError`` result from then on. Failures inside the tool are the runner's to
turn into ``isError`` results.
"""

from __future__ import annotations

from typing import Any

from .. import versions
from ..context import InvalidToolArguments, ToolCall
from ..dispatcher import MessageContext
from ..errors import InvalidParams
from . import dispatcher


@dispatcher.request("tools/list")
async def list_tools(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    return {"tools": message.request.catalog.tools_wire()}


@dispatcher.request("tools/call")
async def call_tool(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    if not params:
        raise InvalidParams("Invalid params: tools/call requires params with a tool name")
    name = params.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidParams('Invalid params: "name" must be a non-empty string')
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise InvalidParams('Invalid params: "arguments" must be an object')
    ctx = message.request
    tool = ctx.catalog.tool(name)
    if tool is None:
        raise InvalidParams(f"Unknown tool: {name}", data={"name": name})
    try:
        return await ctx.runner.call_tool(tool, arguments, ToolCall(request=ctx, progress=message.progress))
    except InvalidToolArguments as exc:
        text = f"Invalid arguments for tool {name}: {exc}"
        if versions.tool_input_errors_in_result(ctx.protocol_version):
            return {"content": [{"type": "text", "text": text}], "isError": True}
        raise InvalidParams(text, data={"name": name}) from exc
