"""The tasks extension (2026-07-28) at the wire: when calls become tasks, the task lifecycle, input through
``tasks/update``, cancellation, and that tasks belong to the agent that created them."""

from __future__ import annotations

import asyncio
import re

from mcp_app.protocol.errors import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_app.runtime import durable

from .test_modern import error_of, modern_call, result_of

TASKS = "io.modelcontextprotocol/tasks"
DECLARING = {"elicitation": {}, "extensions": {TASKS: {}}}
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


async def settled() -> None:
    """Wait (bounded) until the background work of every task in this process has ended and been recorded."""
    for _ in range(3):
        pending = list(durable.lifecycle._background)
        if not pending:
            return
        await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout=5)


async def call_tool(access, name, arguments=None, capabilities=DECLARING, **params):
    return await modern_call(
        access, "tools/call", {"name": name, "arguments": arguments or {}, **params}, capabilities=capabilities
    )


async def task(access, method, task_id, capabilities=DECLARING, **params):
    return await modern_call(access, method, {"taskId": task_id, **params}, capabilities=capabilities)


async def test_discover_advertises_the_extension_only_to_declaring_clients(access):
    declaring = result_of(await modern_call(access, "server/discover", {}, capabilities=DECLARING))
    silent = result_of(await modern_call(access, "server/discover", {}))
    assert declaring["capabilities"]["extensions"] == {TASKS: {}}
    assert "extensions" not in silent["capabilities"]


async def test_a_required_task_tool_refuses_a_client_without_the_extension(make_access):
    access = await make_access(tools=("failing_job",))
    error = error_of(await call_tool(access, "failing_job", capabilities={}), 400, MISSING_REQUIRED_CLIENT_CAPABILITY)
    assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


async def test_an_optional_tool_that_finishes_at_once_answers_directly(make_access):
    access = await make_access(tools=("slow_compute",))
    result = result_of(await call_tool(access, "slow_compute", {"seconds": 0, "label": "now"}))
    assert result["resultType"] == "complete"
    assert result["content"][0]["text"] == "slow_compute 'now' finished after 0s"


async def test_a_slow_call_becomes_a_durable_task_that_completes(make_access, fresh_gate):
    access = await make_access(tools=("gated_job",))
    created = result_of(await call_tool(access, "gated_job"))
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    assert ISO.match(created["createdAt"]) and ISO.match(created["lastUpdatedAt"])
    assert created["ttlMs"] > 0 and created["pollIntervalMs"] > 0
    assert not {"result", "error", "inputRequests", "requestState", "task"} & set(created)
    working = result_of(await task(access, "tasks/get", created["taskId"]))
    assert (working["resultType"], working["status"], working["taskId"]) == ("complete", "working", created["taskId"])
    fresh_gate.gate.release.set()
    await settled()
    done = result_of(await task(access, "tasks/get", created["taskId"]))
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "gated done"}]


async def test_cancel_stops_the_work_and_is_final(make_access, fresh_gate):
    access = await make_access(tools=("gated_job",))
    created = result_of(await call_tool(access, "gated_job"))
    ack = result_of(await task(access, "tasks/cancel", created["taskId"]))
    assert {key for key in ack if key != "_meta"} == {"resultType"}
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    await settled()
    assert result_of(await task(access, "tasks/get", created["taskId"]))["status"] == "cancelled"
    result_of(await task(access, "tasks/cancel", created["taskId"]))  # cancelling a terminal task: ack, no change
    assert result_of(await task(access, "tasks/get", created["taskId"]))["status"] == "cancelled"


async def test_tool_errors_complete_and_protocol_errors_fail(make_access):
    access = await make_access(tools=("failing_job", "protocol_error_job"))
    failing = result_of(await call_tool(access, "failing_job"))
    broken = result_of(await call_tool(access, "protocol_error_job"))
    await settled()
    failing_task = result_of(await task(access, "tasks/get", failing["taskId"]))
    broken_task = result_of(await task(access, "tasks/get", broken["taskId"]))
    assert failing_task["status"] == "completed" and failing_task["result"]["isError"] is True
    assert broken_task["status"] == "failed" and "result" not in broken_task
    assert broken_task["error"]["code"] == -32603


async def test_input_is_collected_with_tasks_update_before_the_task_resumes(make_access):
    access = await make_access(tools=("multi_input",))
    created = result_of(await call_tool(access, "multi_input"))
    await settled()
    parked = result_of(await task(access, "tasks/get", created["taskId"]))
    assert parked["status"] == "input_required"
    first, second = parked["inputRequests"]
    assert parked["inputRequests"][first]["method"] == "elicitation/create"
    answer = {"action": "accept", "content": {"name": "Ada"}}
    result_of(await task(access, "tasks/update", created["taskId"], inputResponses={first: answer}))
    partial = result_of(await task(access, "tasks/get", created["taskId"]))
    assert partial["status"] == "input_required" and list(partial["inputRequests"]) == [second]
    result_of(
        await task(
            access, "tasks/update", created["taskId"], inputResponses={second: {**answer, "content": {"name": "Bo"}}}
        )
    )
    await settled()
    done = result_of(await task(access, "tasks/get", created["taskId"]))
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Answers: Ada, Bo"


async def test_input_asked_before_any_task_is_a_synchronous_round_trip(make_access):
    access = await make_access(tools=("test_tool_with_task",))
    first = result_of(await call_tool(access, "test_tool_with_task"))
    assert first["resultType"] == "input_required" and "taskId" not in first
    second = result_of(
        await call_tool(
            access,
            "test_tool_with_task",
            inputResponses={"user_name": {"action": "accept", "content": {"name": "Alice"}}},
            requestState=first["requestState"],
        )
    )
    assert second["resultType"] == "task"
    await settled()
    done = result_of(await task(access, "tasks/get", second["taskId"]))
    assert done["result"]["content"][0]["text"] == "Hello, Alice!"


async def test_tasks_are_invisible_to_other_agents(make_access, orm, agent_factory, token_factory, fresh_gate):
    access = await make_access(tools=("gated_job",))
    created = result_of(await call_tool(access, "gated_job"))
    other = await orm(agent_factory, tenant=access.tenant)
    _token, raw = await orm(token_factory, agent=other, servers=[access.server])
    intruder = type(access)(access.tenant, access.server, other, _token, raw)
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        extra = {"inputResponses": {}} if method == "tasks/update" else {}
        error_of(await task(intruder, method, created["taskId"], **extra), 400, INVALID_PARAMS)
    fresh_gate.gate.release.set()
    await settled()


async def test_an_agent_over_its_inline_task_cap_is_refused_and_its_call_stopped_while_another_tenant_is_served(
    make_access, fresh_gate, settings
):
    """Issue 19: 300 one-hour tasks of one agent were accepted. Over INLINE_TASKS_PER_AGENT the call that would
    become one more task is answered -32012 (and its work cancelled); another tenant's agent is not affected."""
    from mcp_app.protocol.errors import CAPACITY_EXCEEDED

    settings.MCP_APP = {**settings.MCP_APP, "INLINE_TASKS_PER_AGENT": 2}
    access = await make_access(tools=("gated_job",))
    neighbour = await make_access(tools=("gated_job",))
    for _ in range(2):
        assert result_of(await call_tool(access, "gated_job"))["resultType"] == "task"
    error = error_of(await call_tool(access, "gated_job"), 200, CAPACITY_EXCEEDED)
    assert error["data"] == {"resource": "inline tasks", "scope": "agent", "limit": 2}
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    assert result_of(await call_tool(neighbour, "gated_job"))["resultType"] == "task"
    fresh_gate.gate.release.set()
    await settled()
    assert result_of(await call_tool(access, "gated_job"))["resultType"] in ("task", "complete")
    await settled()
