"""The inline runner: validate a tool's arguments, run the call in this process, check what it returns.

The executor of the target's kind (``runtime.executors``) runs the call; the runner adds what every tool result
gets: the text of structured content, the check against the published ``outputSchema``, the duration and outcome
metric, what the call spent (told to the request's ``UsageMeter`` once, by the run that executes the tool), and
an ``execute_tool`` span when tracing is on. A task-capable call of a declaring client becomes a task
(``runtime.tasks``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from ..definitions.context import error_result
from ..observability import metrics, tracing
from ..protocol.context import CallContext, InvalidToolArguments
from ..protocol.descriptors import PromptDescriptor, ResourceDescriptor, ToolDescriptor
from ..protocol.errors import ProtocolError
from ..protocol.modern import runs_as_task
from .executors import executor_for, text, validator

logger = logging.getLogger("mcp_app.runtime")


class InlineRunner:
    """Runs tool calls in the serving process (the embedded default)."""

    async def call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        """Run the call and record its duration and outcome (``mcp_tool_call_duration_seconds``), in an
        ``execute_tool`` span when tracing is on (here, or on the worker that runs a worker call)."""
        tracer = tracing.active()
        if tracer is not None:
            return await tracer.tool_call(tool, call, self._measured_call(tool, arguments, call))
        return await self._measured_call(tool, arguments, call)

    async def _measured_call(
        self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext
    ) -> dict[str, Any]:
        # A call that becomes a task runs the tool in a second run of this runner (``call_maybe_as_task``): that
        # run, which executes the tool, is the one metered.
        as_task = runs_as_task(tool, call)
        started = time.perf_counter()
        outcome = "exception"
        result: dict[str, Any] | None = None
        try:
            result = await self._call_tool(tool, arguments, call, as_task)
            outcome = "tool_error" if result.get("isError") else "ok"
            return result
        except InvalidToolArguments:
            outcome = "invalid_arguments"
            raise
        except ProtocolError:
            outcome = "protocol_error"
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            seconds = time.perf_counter() - started
            metrics.record_tool_call(tool.name, outcome, seconds)
            if not as_task and outcome != "invalid_arguments":  # refused arguments never ran the tool
                call.request.meter.measured(
                    tool, arguments, call, result, failed=outcome not in ("ok", "tool_error"), seconds=seconds
                )

    async def _call_tool(
        self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext, as_task: bool
    ) -> dict[str, Any]:
        if as_task:
            from .tasks import call_maybe_as_task

            return await call_maybe_as_task(self, tool, arguments, call)
        executor = executor_for(tool.target)
        result = await executor.call(tool, executor.validate(tool, arguments), call)
        if "structuredContent" in result and not any(
            block.get("type") == "text" for block in result.get("content", ())
        ):
            # Clients without structured-output support read the text: serialise the structure there too.
            result = {
                **result,
                "content": [*result.get("content", ()), text(orjson.dumps(result["structuredContent"]).decode())],
            }
        if tool.output_schema and "structuredContent" in result and not result.get("isError"):
            problems = list(validator(tool.output_schema).iter_errors(result["structuredContent"]))
            if problems:
                # The server must conform to its published outputSchema: a non-conforming answer is a failure.
                logger.error(
                    "tool %s returned structuredContent against its outputSchema: %s", tool.name, problems[0].message
                )
                return error_result(
                    f"Tool {tool.name} returned a result that does not match its output schema",
                    "INVALID_OUTPUT",
                    "internal_error",
                )
        return result

    async def read_resource(
        self, resource: ResourceDescriptor, uri: str, variables: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        return await executor_for(resource.target).read(resource, uri, variables, call)

    async def get_prompt(
        self, prompt: PromptDescriptor, arguments: dict[str, str], call: CallContext
    ) -> dict[str, Any]:
        return await executor_for(prompt.target).render(prompt, arguments, call)


def validate_arguments(tool: ToolDescriptor, arguments: dict[str, Any]) -> None:
    """Check ``arguments`` as the tool's executor does before it runs a call (the routing runner, before it
    records or queues one); raises ``InvalidToolArguments`` with every problem."""
    executor_for(tool.target).validate(tool, arguments)
