"""A kind of catalog entry costs a target type and its executor: registered in ``runtime.executors.EXECUTORS``
and nothing else, a kind of the test's own is called at the wire in both eras (a 2025-11-25 session, a stateless
2026-07-28 request), its arguments checked against the schema the tool publishes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_app.catalog import resolver
from mcp_app.protocol.context import CallContext
from mcp_app.protocol.descriptors import ServerCatalog, ToolDescriptor
from mcp_app.protocol.errors import INVALID_PARAMS
from mcp_app.runtime import executors
from tests.helpers import call, error_of, modern_call_tool, open_session, result_of, rpc


@dataclasses.dataclass(frozen=True)
class ShoutTarget:
    suffix: str


class ShoutExecutor(executors.Executor):
    async def call(self, tool: ToolDescriptor, arguments: dict[str, Any], call: CallContext) -> dict[str, Any]:
        text = f"{arguments['text'].upper()}{tool.target.suffix} ({call.request.era})"
        return {"content": [{"type": "text", "text": text}]}


SHOUT = ToolDescriptor(
    name="shout",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    target=ShoutTarget("!"),
)


@pytest.fixture
def shout_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The kind registered, and one tool of it in every server's catalog (which rows would otherwise give)."""
    monkeypatch.setitem(executors.EXECUTORS, ShoutTarget, ShoutExecutor())
    build = resolver.build_catalog

    def with_shout(server: Any) -> ServerCatalog:
        catalog = build(server)
        return dataclasses.replace(catalog, tools=(*catalog.tools, SHOUT))

    monkeypatch.setattr(resolver, "build_catalog", with_shout)
    resolver.clear_cache()
    yield
    resolver.clear_cache()


async def test_a_kind_of_ones_own_is_called_in_both_eras(access: Any, shout_kind: None) -> None:
    session = await open_session(access, initialized=True)
    listed = await call(access, rpc("tools/list"), headers={"mcp-session-id": session})
    assert "shout" in [tool["name"] for tool in result_of(listed)["tools"]]
    legacy = await call(
        access, rpc("tools/call", {"name": "shout", "arguments": {"text": "hi"}}), headers={"mcp-session-id": session}
    )
    assert result_of(legacy)["content"] == [{"type": "text", "text": "HI! (legacy)"}]
    modern = result_of(await modern_call_tool(access, "shout", {"text": "hi"}))
    assert modern["content"] == [{"type": "text", "text": "HI! (modern)"}]


async def test_a_kind_of_ones_own_gets_its_arguments_checked(access: Any, shout_kind: None) -> None:
    error = error_of(await modern_call_tool(access, "shout", {"text": 3}), 400, INVALID_PARAMS)
    assert "text" in error["message"]
