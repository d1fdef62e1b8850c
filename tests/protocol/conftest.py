"""Fixtures for the protocol-core tests: a hand-built ``RequestContext``, no database, no Django models."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from mcp_app.protocol.context import RequestContext
from mcp_app.protocol.descriptors import ServerCatalog, ServerDescription, ToolDescriptor
from mcp_app.protocol.handlers import dispatcher

from .fakes import ABSENT, TOOLS, Emitted, FakeRunner


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner()


@pytest.fixture
def emitted() -> Emitted:
    return Emitted()


@pytest.fixture
def make_ctx(runner: FakeRunner, emitted: Emitted) -> Callable[..., RequestContext]:
    def make(
        protocol_version: str = "2025-11-25",
        tools: Sequence[ToolDescriptor] = TOOLS,
        title: str = "",
        instructions: str = "",
    ) -> RequestContext:
        server = ServerDescription(server_id="srv-1", name="srv", title=title, instructions=instructions)
        return RequestContext(
            server=server,
            catalog=ServerCatalog(tools=tuple(tools)),
            runner=runner,
            protocol_version=protocol_version,
            emit=emitted,
        )

    return make


@pytest.fixture
def rpc() -> Callable[..., Awaitable[Any]]:
    """Send one request through the shared dispatcher and return its response."""

    async def send(ctx: RequestContext, method: str, params: Any = ABSENT, *, id: Any = 1) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not ABSENT:
            message["params"] = params
        return await dispatcher.dispatch(message, ctx, max_batch_size=10)

    return send
