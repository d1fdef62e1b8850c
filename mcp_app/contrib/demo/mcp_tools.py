"""The demo tools, registered in code with ``@tool`` and discovered at start-up."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from mcp_app.catalog import tool
from mcp_app.runtime import ToolContext

READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}


@tool(title="Echo", annotations={**READ_ONLY, "idempotentHint": True}, blocking=False)
def echo(text: Annotated[str, Field(description="The text to return.")]) -> str:
    """Return the given text unchanged."""
    return text


@tool(title="Add", annotations={**READ_ONLY, "idempotentHint": True})
def add(
    a: Annotated[float, Field(description="The first addend.")],
    b: Annotated[float, Field(description="The second addend.")],
) -> float:
    """Add two numbers and return the sum (also as structured content)."""
    return a + b


@tool(title="Current time", annotations=READ_ONLY)
def get_time() -> str:
    """Return the current UTC time in ISO 8601 format."""
    return datetime.now(UTC).isoformat()


@tool(title="Progress demo", annotations=READ_ONLY)
async def progress_demo(
    ctx: ToolContext,
    steps: Annotated[int, Field(ge=1, le=100, description="How many progress notifications to send.")] = 5,
    delay_ms: Annotated[int, Field(ge=0, le=2000, description="Pause between steps, in milliseconds.")] = 0,
) -> str:
    """Report progress once per step (when the client sends a progressToken), then finish."""
    for step in range(1, steps + 1):
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return f"Completed {steps} steps."


@tool(title="Countdown (on a worker)", annotations=READ_ONLY, execution="worker", timeout=600, task_support="optional")
async def countdown(
    ctx: ToolContext,
    steps: Annotated[int, Field(ge=1, le=10_000, description="How many steps to count down.")] = 10,
    interval_ms: Annotated[int, Field(ge=0, le=60_000, description="Pause between steps, in milliseconds.")] = 1000,
) -> int:
    """Count down on a Celery worker, reporting progress at each step; stops early when cancelled. Returns the
    number of steps done. A client that declares tasks gets a task for a countdown that does not finish at once."""
    done = 0
    for step in range(1, steps + 1):
        if ctx.cancelled:
            break
        if interval_ms:
            await asyncio.sleep(interval_ms / 1000)
        if ctx.cancelled:
            break
        done = step
        await ctx.report_progress(step, steps, f"{steps - step} to go")
    return done
