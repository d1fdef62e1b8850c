"""The official MCP Python SDK (``mcp`` package) serving the same two tools as the mcp-host demo, for comparison.

Two ASGI apps, each its own ``MCPServer`` (the SDK keeps one session manager per server), run under uvicorn
(``uvicorn bench.sdk_server:stateful``), both at ``/mcp``, without authorization (the SDK has none built in
that would compare with mcp-host's tokens and grants; mcp-host's figures include its authorization):

- ``stateful``: Streamable HTTP with sessions (``initialize`` gives an ``Mcp-Session-Id``) answering POSTs as
  SSE streams, the SDK's default and the only mode that streams progress;
- ``stateless``: ``stateless_http=True, json_response=True``, its fastest mode, answering 2026-07-28 requests
  (``_meta`` envelope, no ``initialize``) with one JSON response each.

Tools: ``echo(text)`` (sync, as the demo's: the SDK runs it in a worker thread, mcp-host does too) and
``progress_demo(steps)`` (async: ``steps`` progress notifications, then a text result), the demo's signatures.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer


def build() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("bench-sdk", log_level="WARNING")

    @server.tool(title="Echo")
    def echo(text: str) -> str:
        """Return the given text unchanged."""
        return text

    @server.tool(title="Progress demo")
    async def progress_demo(ctx: Context, steps: int = 5) -> str:
        """Report progress once per step, then finish."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
        return f"Completed {steps} steps."

    return server


stateful = build().streamable_http_app(streamable_http_path="/mcp")
stateless = build().streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True)
