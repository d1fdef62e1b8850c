"""``mcp_app.testing``, the pytest plugin shipped for users' projects, used as a user would: through its fixtures.

The plugin is enabled with ``pytest_plugins`` (as docs/install.md says); its fixtures are prefixed ``mcp_`` and
must coexist with this project's own factories from ``tests/conftest.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["mcp_app.testing"]


@pytest.fixture
def mcp_tools() -> list[str]:
    return ["echo", "add", "progress_demo"]


def test_fixtures_give_a_tenant_server_agent_and_scoped_token(mcp_server: Any, mcp_agent: Any, mcp_token: Any) -> None:
    from mcp_app.models import AgentToken

    assert mcp_server.tenant_id == mcp_agent.tenant_id
    assert [binding.tool.name for binding in mcp_server.tool_bindings.order_by("position")] == [
        "echo",
        "add",
        "progress_demo",
    ]
    authenticated = AgentToken.objects.authenticate(mcp_token.raw)
    assert authenticated is not None and authenticated.pk == mcp_token.token.pk
    assert list(authenticated.servers.all()) == [mcp_server]


async def test_legacy_client_lists_and_calls_tools(mcp_client: Any) -> None:
    assert [tool["name"] for tool in await mcp_client.list_tools()] == ["echo", "add", "progress_demo"]
    result = await mcp_client.call_tool("add", {"a": 2, "b": 3})
    assert result["structuredContent"] == {"result": 5.0}
    assert result.get("isError") is not True


async def test_legacy_client_opens_a_session(mcp_client: Any) -> None:
    info = await mcp_client.initialize()
    assert info["protocolVersion"] == "2025-11-25"
    assert mcp_client.session_id
    assert (await mcp_client.call_tool("echo", {"text": "in a session"}))["content"][0]["text"] == "in a session"


async def test_modern_client_speaks_the_stateless_revision(mcp_modern_client: Any) -> None:
    reply = await mcp_modern_client.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert reply.status == 200
    assert "mcp-session-id" not in reply.headers
    assert reply.response["result"]["resultType"] == "complete"
    assert reply.response["result"]["content"][0]["text"] == "hi"


async def test_modern_client_sees_validation_errors_at_the_wire(mcp_modern_client: Any) -> None:
    reply = await mcp_modern_client.request("tools/call", {"name": "add", "arguments": {"a": "two", "b": 1}})
    assert reply.status == 400
    assert reply.response["error"]["code"] == -32602


async def test_progress_arrives_as_stream_messages(mcp_client: Any) -> None:
    reply = await mcp_client.request(
        "tools/call",
        {"name": "progress_demo", "arguments": {"steps": 2, "delay_ms": 0}, "_meta": {"progressToken": "p"}},
    )
    assert reply.headers["content-type"].startswith("text/event-stream")
    methods = [message.get("method") for message in reply.messages]
    assert methods.count("notifications/progress") == 2
    assert "result" in reply.response


def test_project_factories_still_work_beside_the_plugin(access_factory: Any) -> None:
    access = access_factory(tools=("echo",))
    assert access.server.server_id.startswith("server-")
