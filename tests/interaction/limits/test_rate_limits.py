"""Rate limits at the wire (issue 19, "starve the others"): an agent, a tenant or a tool over its rate is refused
with HTTP 429, ``Retry-After`` and JSON-RPC -32011 carrying ``data.retryAfterMs``, in both eras, while the
others are served. On PostgreSQL + Redis the buckets are in Redis (``RedisRates``); on the embedded default in
the process (``LocalRates``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from mcp_app.protocol.errors import RATE_LIMITED
from tests.helpers import call, rpc
from tests.request_path import assert_warm_call_is_free

LEGACY = "2025-11-25"
MODERN = "2026-07-28"


def tool_call(era: str, name: str = "echo", request_id: int = 1) -> tuple[dict[str, Any], dict[str, str]]:
    if era == "modern":
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        }
        body = rpc("tools/call", {"name": name, "arguments": {"text": "hi"}, "_meta": meta}, id=request_id)
        return body, {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}
    body = rpc("tools/call", {"name": name, "arguments": {"text": "hi"}}, id=request_id)
    return body, {"mcp-protocol-version": LEGACY}


def assert_rate_limited(reply: Any, scope: str, request_id: int | None) -> None:
    assert reply.status == 429, reply.body
    assert int(reply.headers["retry-after"]) >= 1
    answer = reply.json()
    assert answer["id"] == request_id
    assert answer["error"]["code"] == RATE_LIMITED == -32011
    data = answer["error"]["data"]
    assert data["scope"] == scope
    assert 0 < data["retryAfterMs"] <= int(reply.headers["retry-after"]) * 1000


@pytest.fixture
def second_agent(orm: Callable[..., Awaitable[Any]], agent_factory: Any, token_factory: Any) -> Any:
    async def make(access: Any) -> Any:
        def create() -> Any:
            agent = agent_factory(tenant=access.tenant)
            token, raw = token_factory(agent=agent, servers=[access.server])
            return replace(access, agent=agent, token=token, raw_token=raw)

        return await orm(create)

    return make


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_an_agent_over_its_rate_gets_429_with_retry_after_while_another_agent_of_its_tenant_is_served(
    era: str, make_access: Callable[..., Awaitable[Any]], orm: Any, second_agent: Any
) -> None:
    access = await make_access(tools=("echo",))
    other = await second_agent(access)
    access.agent.rate_limit, access.agent.rate_burst = 0.2, 2  # one request every 5 s, two at once
    await orm(access.agent.save)
    for request_id in (1, 2):
        body, headers = tool_call(era, request_id=request_id)
        assert (await call(access, body, headers=headers)).status == 200
    body, headers = tool_call(era, request_id=3)
    refused = await call(access, body, headers=headers)
    assert_rate_limited(refused, "agent", 3)
    assert 4 <= int(refused.headers["retry-after"]) <= 5
    for request_id in range(5):  # the tenant's other agent is untouched
        body, headers = tool_call(era, request_id=request_id)
        served = await call(other, body, headers=headers)
        assert served.status == 200, served.body
        assert served.json()["result"]["content"] == [{"type": "text", "text": "hi"}]


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_tenant_over_its_rate_is_refused_while_another_tenant_is_served(
    era: str, make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    access = await make_access(tools=("echo",))
    neighbour = await make_access(tools=("echo",))
    access.tenant.rate_limit, access.tenant.rate_burst = 0.1, 1
    await orm(access.tenant.save)
    body, headers = tool_call(era)
    assert (await call(access, body, headers=headers)).status == 200
    assert_rate_limited(await call(access, body, headers=headers), "tenant", 1)
    for _ in range(3):
        assert (await call(neighbour, body, headers=headers)).status == 200


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_tool_over_its_rate_is_refused_while_the_agents_other_tools_are_served(
    era: str, make_access: Callable[..., Awaitable[Any]], orm: Any
) -> None:
    from mcp_app.models import Tool

    access = await make_access(tools=("echo", "async_echo"))
    await orm(Tool.objects.filter(tenant=access.tenant, name="echo").update, rate_limit=0.1, rate_burst=1)
    body, headers = tool_call(era, "echo")
    assert (await call(access, body, headers=headers)).status == 200
    assert_rate_limited(await call(access, body, headers=headers), "tool", 1)
    body, headers = tool_call(era, "async_echo")
    assert (await call(access, body, headers=headers)).status == 200


async def test_the_settings_give_the_default_rate_and_a_refused_request_draws_nothing(
    make_access: Callable[..., Awaitable[Any]], settings: Any
) -> None:
    """No limit of its own: the RATE_LIMIT_PER_AGENT setting applies. A refused request costs no token of any
    bucket (the check is all-or-nothing), so the tenant keeps its allowance for its other agents."""
    settings.MCP_APP = {**settings.MCP_APP, "RATE_LIMIT_PER_AGENT": 0.1, "RATE_BURST_PER_AGENT": 1}
    access = await make_access(tools=("echo",))
    body, headers = tool_call("legacy")
    assert (await call(access, body, headers=headers)).status == 200
    assert_rate_limited(await call(access, body, headers=headers), "agent", 1)


async def test_a_get_stream_counts_too(make_access: Callable[..., Awaitable[Any]], orm: Any) -> None:
    access = await make_access(tools=("echo",))
    access.agent.rate_limit, access.agent.rate_burst = 0.1, 1
    await orm(access.agent.save)
    body, headers = tool_call("legacy")
    assert (await call(access, body, headers=headers)).status == 200
    refused = await call(access, method="GET", headers={"accept": "text/event-stream", "mcp-protocol-version": LEGACY})
    assert_rate_limited(refused, "agent", None)


async def test_a_batch_draws_one_token_per_message(make_access: Callable[..., Awaitable[Any]], orm: Any) -> None:
    access = await make_access(tools=("echo",))
    access.agent.rate_limit, access.agent.rate_burst = 0.1, 3
    await orm(access.agent.save)
    batch = [tool_call("legacy", request_id=n)[0] for n in range(3)]
    first = await call(access, batch, headers={"mcp-protocol-version": "2025-03-26"})
    assert first.status == 200, first.body
    body, headers = tool_call("legacy")
    assert_rate_limited(await call(access, body, headers=headers), "agent", 1)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_warm_call_with_every_limit_on_runs_no_query_and_no_hop(
    era: str, make_access: Callable[..., Awaitable[Any]], orm: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The limits come from the cached token snapshot and catalog: the budget of tests/transport/test_request_path
    holds with a tenant's, an agent's and a tool's own limits set (the third call proves they were drawn)."""
    from mcp_app.models import Tool

    settings.MCP_APP = {**settings.MCP_APP, "WRITE_BEHIND_INTERVAL_SECONDS": 3600}
    access = await make_access(tools=("async_echo",))
    access.tenant.rate_limit, access.agent.rate_limit = 500.0, 500.0
    await orm(access.tenant.save)
    await orm(access.agent.save)
    await orm(Tool.objects.filter(tenant=access.tenant).update, rate_limit=0.01, rate_burst=2)
    body, headers = tool_call(era, "async_echo")
    await assert_warm_call_is_free(monkeypatch, access, body, headers)
    assert_rate_limited(await call(access, body, headers=headers), "tool", 1)
