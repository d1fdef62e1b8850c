"""Worker-call quotas at the wire, in process (the real router and consumer through ``HttpCommunicator``).

Tools bound with ``execution="worker"`` are admitted against the tenant's and the agent's limits; a refused
call gets JSON-RPC -32010 on HTTP 200 in both eras and never runs; inline tools are not counted; an operator's
edit of ``max_worker_calls`` applies to the next request. The limits come from the cached token snapshot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_app.caching import identity
from mcp_app.limits import quotas
from mcp_app.models import Agent, AgentToken, ServerTool, Tenant
from mcp_app.protocol.errors import WORKER_QUOTA_EXCEEDED
from tests.helpers import Reply, call, communicator, error_of, result_of, rpc
from tests.helpers import modern_call_tool as call_tool

# Worker calls run in this process here (no Celery worker in these tests): admission is the same either way.
pytestmark = pytest.mark.usefixtures("worker_calls_drained")


@pytest.fixture(autouse=True)
def _in_process(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_DISPATCH": "in_process"}


HELD = rpc("tools/call", {"name": "wait_for_release", "arguments": {}}, id="held")
RECORD = rpc("tools/call", {"name": "record", "arguments": {"kind": "alpha"}}, id="second")


def bind_as_worker(server: Any, *names: str) -> None:
    for binding in ServerTool.objects.filter(server=server, tool__name__in=names):
        binding.execution = "worker"
        binding.save()


def set_limits(access: Any, *, tenant: int | None = None, agent: int | None = None) -> None:
    """Edit the limits as the admin does (``save()``: signals publish the invalidation)."""
    row = Tenant.objects.get(pk=access.tenant.pk)
    row.max_worker_calls = tenant
    row.save()
    agent_row = Agent.objects.get(pk=access.agent.pk)
    agent_row.max_worker_calls = agent
    agent_row.save()


@pytest.fixture
async def worker_access(make_access: Callable[..., Awaitable[Any]], orm: Any, fresh_gate: Any) -> Any:
    """``wait_for_release`` and ``record`` bound as worker tools, ``echo`` inline; no call recorded yet."""
    access = await make_access(tools=("wait_for_release", "record", "echo"))
    await orm(bind_as_worker, access.server, "wait_for_release", "record")
    fresh_gate.executions.clear()
    return access


async def start_held_call(access: Any, gate: Any) -> Any:
    """A worker call that runs until the test releases the gate; returns its communicator once it runs."""
    comm = communicator(access, HELD)
    await comm.send_input({"type": "http.request", "body": comm.body})
    await asyncio.wait_for(gate.started.wait(), timeout=5)
    return comm


async def finish(comm: Any) -> Reply:
    response = await comm.get_response(timeout=5)
    await comm.wait(timeout=5)
    headers = {key.decode().lower(): value.decode() for key, value in response["headers"]}
    return Reply(status=response["status"], headers=headers, body=response["body"])


def quota_error(reply: Reply) -> dict[str, Any]:
    assert reply.status == 200, reply.body
    body = reply.json()
    assert "result" not in body, body
    assert body["error"]["code"] == WORKER_QUOTA_EXCEEDED == -32010, body
    return dict(body["error"])


async def test_a_worker_call_over_its_tenants_quota_is_refused_in_both_eras_and_never_runs(
    worker_access: Any, orm: Any, fresh_gate: Any
) -> None:
    access = worker_access
    await orm(set_limits, access, tenant=1)
    held = await start_held_call(access, fresh_gate.gate)

    legacy = quota_error(await call(access, RECORD))
    assert legacy["data"] == {"scope": "tenant", "limit": 1}
    assert "tenant may run at most 1" in legacy["message"]
    modern = error_of(await call_tool(access, "record", {"kind": "beta"}), 200, WORKER_QUOTA_EXCEEDED)
    assert modern["data"] == {"scope": "tenant", "limit": 1}
    assert fresh_gate.executions == [], "a refused call must not run its tool"

    inline = await call(access, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert inline.status == 200 and "result" in inline.json(), "inline tools are not counted"

    fresh_gate.gate.release.set()
    done = await finish(held)
    assert done.status == 200 and done.json()["result"]["content"][0]["text"] == "released"
    assert result_of(await call_tool(access, "record", {"kind": "beta"}))["content"][0]["text"] == "beta x1"
    assert fresh_gate.executions == [("record", {"kind": "beta", "count": 1})]


async def test_an_agents_own_limit_refuses_it_while_another_agent_of_its_tenant_is_admitted(
    worker_access: Any, orm: Any, fresh_gate: Any, agent_factory: Any, token_factory: Any
) -> None:
    access = worker_access
    await orm(set_limits, access, tenant=None, agent=1)  # the tenant: the setting (50)
    held = await start_held_call(access, fresh_gate.gate)
    refused = quota_error(await call(access, RECORD))
    assert refused["data"] == {"scope": "agent", "limit": 1}
    assert "agent may run at most 1" in refused["message"]

    def other_agent() -> Any:
        agent = agent_factory(tenant=access.tenant)
        _token, raw = token_factory(agent=agent, servers=[access.server])
        return type(access)(tenant=access.tenant, server=access.server, agent=agent, token=_token, raw_token=raw)

    other = await orm(other_agent)
    admitted = await call(other, RECORD)
    assert admitted.status == 200 and admitted.json()["result"]["content"][0]["text"] == "alpha x1"
    fresh_gate.gate.release.set()
    await finish(held)


async def test_an_operators_edit_of_the_limit_applies_to_the_next_request(
    worker_access: Any, orm: Any, fresh_gate: Any
) -> None:
    access = worker_access
    await orm(set_limits, access, tenant=1)
    held = await start_held_call(access, fresh_gate.gate)
    quota_error(await call(access, RECORD))
    await orm(set_limits, access, tenant=2)  # the cached token snapshot is invalidated by the save
    admitted = await call(access, RECORD)
    assert admitted.status == 200 and "result" in admitted.json(), admitted.body
    await orm(set_limits, access, tenant=0)  # 0: unlimited
    assert "result" in (await call(access, RECORD)).json()
    fresh_gate.gate.release.set()
    await finish(held)
    assert quotas.running_calls(tenants=[access.tenant.pk])[0] == {access.tenant.pk: 0}


def test_the_cached_token_carries_the_effective_limits(
    transactional_db: None, access_factory: Callable[..., Any], settings: Any
) -> None:
    access = access_factory(tools=())
    digest = AgentToken.objects.get(pk=access.token.pk).digest

    def limits() -> tuple[int, int]:
        entry = identity.token(digest, load=True)
        assert entry is not None
        return quotas.limits_for(entry)

    assert limits() == (50, 20)  # WORKER_CALLS_PER_TENANT, WORKER_CALLS_PER_AGENT
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_CALLS_PER_TENANT": 0, "WORKER_CALLS_PER_AGENT": 4}
    assert limits() == (0, 4)
    set_limits(access, tenant=3, agent=0)
    assert limits() == (3, 0)
    cached = identity.token(digest, load=False)  # no query: the snapshot answers
    assert quotas.limits_for(cached) == (3, 0)


async def test_with_the_quota_backend_unreachable_a_worker_call_is_refused_with_503_and_inline_calls_run(
    worker_access: Any, use_backend: Any, fresh_gate: Any
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    use_backend("WORKER_QUOTAS", quotas.RedisQuotas(f"redis://127.0.0.1:{port}/0"))
    refused = await call(worker_access, RECORD)
    assert refused.status == 503 and refused.headers.get("retry-after") == "1", refused.body
    assert fresh_gate.executions == [], "a limit that cannot be checked is not lifted"
    inline = await call(worker_access, rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    assert inline.status == 200 and "result" in inline.json()


async def test_a_call_that_became_a_task_keeps_its_slot_until_its_work_ends(
    make_access: Callable[..., Awaitable[Any]], orm: Any, fresh_gate: Any
) -> None:
    from tests.helpers import DECLARING, settled

    access = await make_access(tools=("gated_job", "record"))
    await orm(bind_as_worker, access.server, "gated_job", "record")
    await orm(set_limits, access, tenant=1)
    fresh_gate.executions.clear()
    created = result_of(await call_tool(access, "gated_job", {}, capabilities=DECLARING))
    assert created["resultType"] == "task" and created["status"] == "working"
    # The request was answered with the task; its work still runs, and still holds the tenant's only slot.
    quota_error(await call(access, RECORD))
    assert fresh_gate.executions == []
    fresh_gate.gate.release.set()
    await settled()
    assert "result" in (await call(access, RECORD)).json()
    assert fresh_gate.executions == [("record", {"kind": "alpha", "count": 1})]


async def test_a_cancelled_worker_call_gives_its_slot_back(worker_access: Any, orm: Any, fresh_gate: Any) -> None:
    access = worker_access
    await orm(set_limits, access, tenant=1)
    held = await start_held_call(access, fresh_gate.gate)
    quota_error(await call(access, RECORD))
    await held.send_input({"type": "http.disconnect"})  # the client goes away: the call is cancelled
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await held.wait(timeout=5)
    assert quotas.running_calls(tenants=[access.tenant.pk])[0] == {access.tenant.pk: 0}
    assert "result" in (await call(access, RECORD)).json()
