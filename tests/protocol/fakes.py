"""In-test implementations of the protocol interfaces: a real ``ToolRunner`` and an ``Emit`` that records.

``FakeRunner`` is not a mock: it records its calls and can be told to reject the arguments, to fail, or to
report a sequence of progress values before answering.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp_app.protocol.context import CallContext, InvalidToolArguments
from mcp_app.protocol.descriptors import ToolDescriptor

ABSENT: Any = object()

TOOLS = (
    ToolDescriptor(
        name="echo",
        description="Echo the text back.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    ToolDescriptor(name="now", input_schema={"type": "object"}),
)


class FakeRunner:
    """Answers each call with a text block naming the tool, unless told to reject, fail or report progress."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], CallContext]] = []
        self.reject: str | None = None
        self.error: Exception | None = None
        self.progress: Sequence[float] = ()

    async def call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        self.calls.append((tool.name, arguments, call))
        if self.reject is not None:
            raise InvalidToolArguments(self.reject)
        if self.error is not None:
            raise self.error
        for value in self.progress:
            await call.progress.report(value, total=10)
        return {"content": [{"type": "text", "text": f"ran {tool.name}"}], "isError": False}


class Emitted(list[dict[str, Any]]):
    """An ``Emit`` that keeps what it is given."""

    async def __call__(self, message: dict[str, Any]) -> None:
        self.append(message)
