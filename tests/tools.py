"""Python tools registered for the test suite only (imported by conftest)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from pydantic import Field

from mcp_app.catalog import tool
from mcp_app.runtime import InputRequired, ToolContext, ToolError, ToolResult


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


# Every run of ``record``, ``regional`` and ``sharded``, so tests can prove a refused call never ran the tool.
executions: list[tuple[str, dict[str, Any]]] = []


@tool
def record(kind: Literal["alpha", "beta"], count: int = 1) -> str:
    """Record that it ran; the arguments are closed (an enum and an integer)."""
    executions.append(("record", {"kind": kind, "count": count}))
    return f"{kind} x{count}"


@tool
def regional(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})] = "",
    note: str = "",
) -> dict[str, str]:
    """A tool whose ``region`` argument is mirrored by the ``Mcp-Param-Region`` header (2026-07-28)."""
    executions.append(("regional", {"region": region, "note": note}))
    return {"region": region, "note": note}


@tool
def sharded(shard: Annotated[int, Field(json_schema_extra={"x-mcp-header": "Shard"})]) -> dict[str, int]:
    """A tool whose integer ``shard`` argument is mirrored by the ``Mcp-Param-Shard`` header."""
    executions.append(("sharded", {"shard": shard}))
    return {"shard": shard}


CONFIRM_REQUEST = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Really do it?",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    },
}


@tool
async def confirm_action(ctx: ToolContext, action: str):  # returns InputRequired or a ToolResult
    """Ask the client to confirm (multi-round trip), then report the state and answers it got back."""
    if ctx.state is None:
        return InputRequired(requests={"confirm": CONFIRM_REQUEST}, state={"action": action, "round": 1})
    seen = {"state": ctx.state, "inputResponses": dict(ctx.input_responses), "action": action}
    return ToolResult(content=[{"type": "text", "text": "confirmed"}], structured_content=seen)


@tool
async def chatty(ctx: ToolContext) -> str:
    """Log one message at each of four levels; the client decides (``_meta`` logLevel) which it receives."""
    for level in ("debug", "info", "warning", "error"):
        await ctx.log(level, f"{level} message", logger="chatty")
    return "logged"


NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@tool
async def ask_name(ctx: ToolContext) -> str:
    """Ask the user for their name through the client (handshake-era elicitation)."""
    answer = await ctx.elicit("What is your name?", NAME_SCHEMA)
    if answer.get("action") != "accept":
        return f"no name ({answer.get('action')})"
    return f"Hello, {answer['content']['name']}!"


@tool
async def progress_then_wait(ctx: ToolContext) -> str:
    """Report progress, wait for the test to release it, report again, finish: a call that outlives a disconnect."""
    await ctx.report_progress(1, 2, "first half")
    gate.started.set()
    await gate.release.wait()
    await ctx.report_progress(2, 2, "second half")
    return "finished"


@tool(task_support="optional")
async def gated_job() -> str:
    """Runs until the test releases it; a task for clients that declare the tasks extension."""
    gate.started.set()
    try:
        await gate.release.wait()
    except asyncio.CancelledError:
        gate.cancelled.set()
        raise
    return "gated done"


@tool
async def progress_flood(ctx: ToolContext, steps: int = 100, pad: int = 1000) -> str:
    """Report progress ``steps`` times, each message ``pad`` bytes long, as fast as the loop turns: more than a
    slow consumer can take."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"{step:>{pad}}")
        await asyncio.sleep(0)  # each its own write, as a tool that reports over time would
    return f"flooded {steps}"


@tool
async def big_answer(size: int) -> str:
    """An answer ``size`` characters long: larger than any request may be (MAX_BODY_BYTES) when need be."""
    return "x" * size


@tool
def sync_echo(text: str) -> str:
    """Return the text, from a sync function (one thread hop to run it)."""
    return text


@tool
async def async_echo(text: str) -> str:
    """Return the text, from a coroutine (no thread hop to run it)."""
    return text


def _note(path: str, line: str) -> None:
    """One line appended to ``path`` (O_APPEND: whole lines, even from several processes)."""
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


async def _worker_job(
    ctx: ToolContext,
    path: str = "",
    tag: str = "",
    steps: int = 0,
    interval_ms: int = 0,
    ask: bool = False,
) -> dict[str, Any]:
    """A worker tool that leaves a trace in ``path``: "<tag> start <pid>", "<tag> step <n>" after each step (with
    progress), "<tag> stopped" when cancelled, "<tag> finished" at the end. With ``ask`` it elicits first."""
    import os

    _note(path, f"{tag} start {os.getpid()}")
    answer: dict[str, Any] | None = None
    if ask:
        answer = await ctx.elicit("Go on?", {"type": "object", "properties": {"go": {"type": "boolean"}}})
    done = 0
    try:
        for step in range(1, steps + 1):
            if ctx.cancelled:
                _note(path, f"{tag} stopped")
                return {"done": done, "tag": tag, "pid": os.getpid()}
            if interval_ms:
                await asyncio.sleep(interval_ms / 1000)
            done = step
            _note(path, f"{tag} step {step}")
            await ctx.report_progress(step, steps, f"step {step}")
    except asyncio.CancelledError:
        _note(path, f"{tag} stopped")
        raise
    _note(path, f"{tag} finished")
    return {"done": done, "tag": tag, "pid": os.getpid(), "answer": answer}


worker_job = tool(name="worker_job", execution="worker", timeout=120)(_worker_job)
# The same work as a 2026 task-capable tool (a durable task once it runs past TASK_IMMEDIATE_SECONDS).
tool(name="worker_task_job", execution="worker", timeout=120, task_support="optional")(_worker_job)


@tool(execution="worker")
async def worker_heap() -> dict[str, int]:
    """Where the call ran and how many objects that process froze out of the collector's sight (gc.freeze)."""
    import gc
    import os

    return {"pid": os.getpid(), "frozen": gc.get_freeze_count()}


@tool(execution="worker", task_support="required")
async def worker_refusal(reason: str = "not on this worker") -> str:
    """A worker tool that runs as a task (2026) and refuses: its task settles completed with an isError result."""
    raise ToolError(reason)


@tool
def metered_lookup(cost: Any = 0.01) -> ToolResult:
    """Answer and report what the call cost in ``_meta`` (the usage ledger adds it to the tool's price)."""
    return ToolResult(content=[{"type": "text", "text": "looked up"}], meta={"io.mcp-host/cost": cost})
