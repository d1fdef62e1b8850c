"""The composition root at the wire: whatever ``services.get_runner()`` returns runs every call, in both eras and
in the admin's console, so a deployment swaps the runner in one place (``set_runner``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mcp_app import services
from mcp_app.protocol.context import CallContext
from mcp_app.protocol.descriptors import ToolDescriptor
from mcp_app.protocol.ports import NO_CHANNEL
from tests.helpers import call, rpc


class RecordingRunner:
    """Answers every tool call itself and notes the era and back-channel it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool]] = []

    async def call_tool(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        self.calls.append((tool.name, call.request.era, call.outbound is not NO_CHANNEL))
        return {"content": [{"type": "text", "text": f"swapped {tool.name}"}]}

    async def read_resource(self, *args: Any) -> dict[str, Any]:
        raise NotImplementedError

    async def get_prompt(self, *args: Any) -> dict[str, Any]:
        raise NotImplementedError


@pytest.fixture
def swapped() -> Iterator[RecordingRunner]:
    runner = RecordingRunner()
    services.set_runner(runner)
    try:
        yield runner
    finally:
        services.set_runner(None)


async def test_the_swapped_runner_serves_both_eras(access: Any, swapped: RecordingRunner) -> None:
    legacy = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "a"}}))
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    modern = await call(
        access,
        rpc("tools/call", {"name": "echo", "arguments": {"text": "b"}, "_meta": meta}),
        headers={"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"},
    )
    assert legacy.status == 200 and modern.status == 200
    assert legacy.json()["result"]["content"] == [{"type": "text", "text": "swapped echo"}]
    assert modern.json()["result"]["content"] == [{"type": "text", "text": "swapped echo"}]
    # The handshake era gets a back-channel, the stateless era none.
    assert swapped.calls == [("echo", "legacy", True), ("echo", "modern", False)]


async def test_the_admin_console_uses_the_same_runner(access: Any, swapped: RecordingRunner) -> None:
    from mcp_app.transport.console import run_as

    run = await run_as(access.token, access.server, "tools/call", {"name": "echo", "arguments": {"text": "c"}})
    assert run.result == {"content": [{"type": "text", "text": "swapped echo"}]}
    assert swapped.calls == [("echo", "legacy", False)]  # the console has no client to ask: no back-channel


def test_the_default_runner_comes_back() -> None:
    """The default is the routing runner: worker tools to the workers, the rest to the inline runner."""
    from mcp_app.runtime.execution import InlineRunner
    from mcp_app.workers.serving.runner import RoutingRunner

    services.set_runner(None)
    runner = services.get_runner()
    assert isinstance(runner, RoutingRunner) and isinstance(runner.inline, InlineRunner)
    assert services.get_runner() is services.get_runner()
