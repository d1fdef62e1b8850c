"""Caps at the wire (issue 19, "starve the others"): concurrent GET and listen streams and live sessions per agent
and per tenant (429, JSON-RPC -32012, ``Retry-After``), and the process's guard on file descriptors (503), while
other tenants are served. Stream slots are leases in Redis on PostgreSQL + Redis, in the process on the embedded
default.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.testing import HttpCommunicator

from mcp_app.protocol.errors import CAPACITY_EXCEEDED
from tests.helpers import call, communicator, modern_body, routing_headers, rpc

LEGACY = "2025-11-25"
GET_STREAM = {"accept": "text/event-stream", "mcp-protocol-version": LEGACY}


@pytest.fixture
def unthrottled(settings: Any) -> None:
    """Streams opened as fast as a test can: no rate limit gets in the way of the caps under test."""
    settings.MCP_APP = {**settings.MCP_APP, "RATE_LIMIT_PER_AGENT": 0, "RATE_LIMIT_PER_TENANT": 0}


async def open_stream(access: Any) -> tuple[HttpCommunicator, dict[str, Any]]:
    comm = communicator(access, method="GET", headers=GET_STREAM)
    await comm.send_input({"type": "http.request", "body": b""})
    start = await comm.receive_output(timeout=30)
    if start["status"] == 200:
        assert b"ready" in (await comm.receive_output(timeout=30))["body"]
    return comm, start


async def close(comm: HttpCommunicator) -> None:
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(timeout=10)


async def refusal(comm: HttpCommunicator, start: dict[str, Any]) -> dict[str, Any]:
    import orjson

    body = (await comm.receive_output(timeout=5))["body"]
    await comm.wait(timeout=5)
    return {"status": start["status"], "headers": dict(start["headers"]), "json": orjson.loads(body)}


def assert_capped(refused: dict[str, Any], status: int, scope: str, request_id: Any = None) -> None:
    assert refused["status"] == status
    assert int(refused["headers"][b"retry-after"]) >= 1
    answer = refused["json"]
    assert answer["id"] == request_id
    assert answer["error"]["code"] == CAPACITY_EXCEEDED == -32012
    assert answer["error"]["data"]["scope"] == scope


async def test_an_agent_over_its_stream_cap_is_refused_while_another_tenant_is_served_and_a_closed_stream_frees_a_slot(
    make_access: Callable[..., Awaitable[Any]], settings: Any, unthrottled: None
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "STREAMS_PER_AGENT": 3}
    access = await make_access(tools=("echo",))
    neighbour = await make_access(tools=("echo",))
    held = []
    for _ in range(3):
        comm, start = await open_stream(access)
        assert start["status"] == 200
        held.append(comm)
    comm, start = await open_stream(access)
    assert_capped(await refusal(comm, start), 429, "agent")
    other, start = await open_stream(neighbour)
    assert start["status"] == 200
    assert (await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}))).status == 200
    await close(held.pop())
    comm, start = await open_stream(access)
    assert start["status"] == 200
    for stream in [*held, comm, other]:
        await close(stream)


async def test_a_tenants_stream_cap_spans_its_agents(
    make_access: Callable[..., Awaitable[Any]],
    settings: Any,
    unthrottled: None,
    agent_factory: Any,
    token_factory: Any,
    orm: Any,
) -> None:
    from dataclasses import replace

    settings.MCP_APP = {**settings.MCP_APP, "STREAMS_PER_TENANT": 2}
    access = await make_access(tools=("echo",))

    def second() -> Any:
        agent = agent_factory(tenant=access.tenant)
        token, raw = token_factory(agent=agent, servers=[access.server])
        return replace(access, agent=agent, token=token, raw_token=raw)

    other_agent = await orm(second)
    first, _ = await open_stream(access)
    second_stream, _ = await open_stream(other_agent)
    comm, start = await open_stream(other_agent)
    assert_capped(await refusal(comm, start), 429, "tenant")
    await close(first)
    await close(second_stream)


async def test_a_listen_stream_takes_a_slot_too(
    make_access: Callable[..., Awaitable[Any]], settings: Any, unthrottled: None
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "STREAMS_PER_AGENT": 1}
    access = await make_access(tools=("echo",))
    held, start = await open_stream(access)
    assert start["status"] == 200
    body = modern_body("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id=7)
    comm = communicator(access, body, headers=routing_headers(body))
    await comm.send_input({"type": "http.request", "body": comm.body})
    assert_capped(await refusal(comm, await comm.receive_output(timeout=5)), 429, "agent", 7)
    await close(held)


async def test_the_1001st_stream_of_an_agent_is_refused_at_the_default_cap_while_another_tenant_is_served(
    make_access: Callable[..., Awaitable[Any]], unthrottled: None
) -> None:
    from django.conf import settings

    from mcp_app.conf import mcp_settings

    assert mcp_settings.STREAMS_PER_AGENT == 1000
    if settings.REDIS_URL:
        # 1,000 streams through the Redis layer in one test process take minutes on CI's machine; the caps are
        # taken the same way there, at a smaller cap (the tests above), and at the default on the embedded run.
        pytest.skip("at the default cap on the embedded run only")
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 4096:
        pytest.skip("in process, 1,000 streams need no descriptor each, but the Redis pool may; raise ulimit -n")
    access = await make_access(tools=("echo",))
    neighbour = await make_access(tools=("echo",))
    started = time.monotonic()
    opened = []
    for _ in range(20):  # in rounds of 50: all at once, the in-process test client starves its own timeouts
        opened += await asyncio.gather(*(open_stream(access) for _ in range(50)))
    assert [start["status"] for _comm, start in opened] == [200] * 1000
    comm, start = await open_stream(access)
    assert_capped(await refusal(comm, start), 429, "agent")
    other, start = await open_stream(neighbour)
    assert start["status"] == 200
    assert (await call(neighbour, rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}))).status == 200
    await asyncio.gather(*(close(comm) for comm, _start in opened), close(other))
    assert time.monotonic() - started < 120


async def test_a_process_short_of_file_descriptors_refuses_new_streams_with_503_and_still_serves_calls(
    make_access: Callable[..., Awaitable[Any]], settings: Any
) -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    settings.MCP_APP = {**settings.MCP_APP, "FD_RESERVE": soft}  # as if every descriptor but the reserve were taken
    access = await make_access(tools=("echo",))
    comm, start = await open_stream(access)
    assert_capped(await refusal(comm, start), 503, "process")
    assert (await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}))).status == 200


async def initialize(access: Any, request_id: int = 1) -> Any:
    params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    return await call(access, rpc("initialize", params, id=request_id))


async def test_an_agent_over_its_session_cap_is_refused_until_it_ends_one_while_another_tenant_is_served(
    make_access: Callable[..., Awaitable[Any]], settings: Any
) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "SESSIONS_PER_AGENT": 2}
    access = await make_access(tools=("echo",))
    neighbour = await make_access(tools=("echo",))
    sessions = []
    for request_id in (1, 2):
        opened = await initialize(access, request_id)
        assert opened.status == 200
        sessions.append(opened.headers["mcp-session-id"])
    refused = await initialize(access, 3)
    assert refused.status == 429 and "mcp-session-id" not in refused.headers
    assert_capped(
        {"status": 429, "headers": {b"retry-after": refused.headers["retry-after"]}, "json": refused.json()},
        429,
        "agent",
        3,
    )
    assert (await initialize(neighbour)).status == 200
    ended = await call(access, method="DELETE", headers={"mcp-session-id": sessions[0], "mcp-protocol-version": LEGACY})
    assert ended.status == 204
    assert (await initialize(access, 4)).status == 200
