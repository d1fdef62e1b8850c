"""Python tools registered for the test suite only (imported by conftest)."""

from __future__ import annotations

import asyncio

from mcp_app.catalog import tool
from mcp_app.runtime import ToolContext, ToolError


class Gate:
    """Lets a test observe a running tool: it signals when started and when cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()


gate = Gate()


@tool
def whoami(ctx: ToolContext) -> dict[str, str | None]:
    """Return who the runtime says is calling."""
    return {"tenant": ctx.tenant, "agent_id": ctx.agent_id, "server_id": ctx.server_id}


@tool
def boom() -> str:
    """Fail with an unexpected exception whose text must not reach the client."""
    raise RuntimeError("database password is hunter2")


@tool
def refuse(reason: str = "not today") -> str:
    """Refuse with a message the client should read."""
    raise ToolError(reason)


@tool
async def wait_for_release() -> str:
    """Block until the test releases it; records cancellation."""
    gate.started.set()
    try:
        await gate.release.wait()
    except asyncio.CancelledError:
        gate.cancelled.set()
        raise
    return "released"
