"""2025-11-25 experimental tasks through the real consumer (in-process): task-augmented ``tools/call``,
``tasks/get``, ``tasks/result``, ``tasks/list``, ``tasks/cancel``, and what the revision's tool-level negotiation
refuses. Expected values are the spec's (``spec/2025-11-25/basic/utilities/tasks.mdx``); the same behaviour
against a real daphne, with status notifications on the GET stream, is ``tests/e2e/test_handshake_tasks.py``.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from mcp_app.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_app.runtime import durable
from tests.helpers import call, rpc, settled

V = "2025-11-25"
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
RELATED = "io.modelcontextprotocol/related-task"


class Session:
    def __init__(self, access: Any, version: str = V) -> None:
        self.access = access
        self.version = version
        self.headers: dict[str, str] = {}
        self.capabilities: dict[str, Any] = {}

    async def open(self, capabilities: dict[str, Any] | None = None) -> Session:
        init = rpc(
            "initialize",
            {
                "protocolVersion": self.version,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        )
        reply = await call(self.access, init)
        assert reply.status == 200
        self.capabilities = reply.json()["result"]["capabilities"]
        self.headers = {"mcp-session-id": reply.headers["mcp-session-id"], "mcp-protocol-version": self.version}
        return self

    async def send(self, method: str, params: dict[str, Any] | None = None, id: int | str = 1) -> dict[str, Any]:
        reply = await call(self.access, rpc(method, params, id=id), headers=self.headers)
        assert reply.status == 200, reply.body
        messages = reply.sse_messages() if reply.content_type.startswith("text/event-stream") else [reply.json()]
        return messages[-1]

    async def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self.send(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def error(self, method: str, params: dict[str, Any] | None, code: int) -> dict[str, Any]:
        answer = await self.send(method, params)
        assert "error" in answer, answer
        assert answer["error"]["code"] == code, answer
        return answer["error"]


def check_task(task: dict[str, Any], status: str) -> None:
    assert task["status"] == status
    assert isinstance(task["taskId"], str) and len(task["taskId"]) >= 32
    assert ISO.match(task["createdAt"]) and ISO.match(task["lastUpdatedAt"])
    assert isinstance(task["ttl"], int) and task["ttl"] > 0
    assert set(task) <= {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}


async def test_initialize_advertises_tasks_and_tools_list_shows_task_support(make_access):
    access = await make_access(tools=("gated_job", "echo", "failing_job"))
    session = await Session(access).open()
    assert session.capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    tools = {tool["name"]: tool for tool in (await session.result("tools/list"))["tools"]}
    assert tools["gated_job"]["execution"] == {"taskSupport": "optional"}
    assert tools["failing_job"]["execution"] == {"taskSupport": "required"}
    assert "execution" not in tools["echo"]


async def test_earlier_revisions_neither_advertise_nor_know_tasks(make_access):
    access = await make_access(tools=("gated_job", "echo"))
    session = await Session(access, "2025-06-18").open()
    assert "tasks" not in session.capabilities
    tools = {tool["name"]: tool for tool in (await session.result("tools/list"))["tools"]}
    assert "execution" not in tools["gated_job"]
    # params.task is ignored by a receiver that does not declare tasks: the call is answered as usual.
    plain = await session.result("tools/call", {"name": "echo", "arguments": {"text": "hi"}, "task": {"ttl": 60000}})
    assert plain["content"] == [{"type": "text", "text": "hi"}] and "task" not in plain
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        await session.error(method, {"taskId": "x"}, METHOD_NOT_FOUND)
    await session.error("tasks/list", {}, METHOD_NOT_FOUND)


async def test_a_task_augmented_call_is_working_then_completed_and_result_blocks(make_access, fresh_gate):
    access = await make_access(tools=("gated_job",))
    session = await Session(access).open()
    created = await session.result("tools/call", {"name": "gated_job", "arguments": {}, "task": {"ttl": 60000}})
    assert set(created) == {"task"}
    check_task(created["task"], "working")
    assert created["task"]["ttl"] == 60000
    task_id = created["task"]["taskId"]
    got = await session.result("tasks/get", {"taskId": task_id})
    check_task(got, "working")
    assert "_meta" not in got
    waiting = asyncio.ensure_future(session.result("tasks/result", {"taskId": task_id}))
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done, "tasks/result must block while the task is working"
    fresh_gate.gate.release.set()
    result = await asyncio.wait_for(waiting, timeout=10)
    assert result["content"] == [{"type": "text", "text": "gated done"}]
    assert result["_meta"][RELATED] == {"taskId": task_id}
    check_task(await session.result("tasks/get", {"taskId": task_id}), "completed")


async def test_a_tool_error_fails_the_task_and_result_returns_the_is_error_result(make_access):
    access = await make_access(tools=("refuse", "failing_job"))
    session = await Session(access).open()
    # failing_job is taskSupport "required"; its ToolError is an isError result, which 2025-11-25 calls failed.
    task_id = (await session.result("tools/call", {"name": "failing_job", "task": {}}))["task"]["taskId"]
    result = await session.result("tasks/result", {"taskId": task_id})
    assert result["isError"] is True
    assert result["content"][0]["text"] == "failing_job failed on purpose"
    task = await session.result("tasks/get", {"taskId": task_id})
    check_task(task, "failed")
    assert task["statusMessage"] == "Tool execution failed: failing_job failed on purpose"


async def test_a_protocol_error_is_what_tasks_result_answers(make_access):
    access = await make_access(tools=("protocol_error_job",))
    session = await Session(access).open()
    task_id = (await session.result("tools/call", {"name": "protocol_error_job", "task": {}}))["task"]["taskId"]
    error = await session.error("tasks/result", {"taskId": task_id}, INTERNAL_ERROR)
    assert error["message"] == "protocol_error_job failed on purpose"
    check_task(await session.result("tasks/get", {"taskId": task_id}), "failed")


async def test_cancel_stops_the_tool_and_a_terminal_task_cannot_be_cancelled(make_access, fresh_gate):
    access = await make_access(tools=("gated_job",))
    session = await Session(access).open()
    task_id = (await session.result("tools/call", {"name": "gated_job", "task": {}}))["task"]["taskId"]
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    cancelled = await session.result("tasks/cancel", {"taskId": task_id})
    check_task(cancelled, "cancelled")
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)  # the tool saw CancelledError
    await settled()
    check_task(await session.result("tasks/get", {"taskId": task_id}), "cancelled")
    error = await session.error("tasks/cancel", {"taskId": task_id}, INVALID_PARAMS)
    assert error["message"] == "Cannot cancel task: already in terminal status 'cancelled'"
    await session.error("tasks/result", {"taskId": task_id}, INTERNAL_ERROR)


async def test_tool_level_negotiation_errors(make_access):
    access = await make_access(tools=("echo", "failing_job"))
    session = await Session(access).open()
    await session.error("tools/call", {"name": "echo", "arguments": {"text": "x"}, "task": {}}, METHOD_NOT_FOUND)
    await session.error("tools/call", {"name": "failing_job"}, METHOD_NOT_FOUND)
    await session.error("tools/call", {"name": "failing_job", "task": 5}, INVALID_PARAMS)
    await session.error("tools/call", {"name": "failing_job", "task": {"ttl": -1}}, INVALID_PARAMS)


async def test_unknown_ids_and_bad_cursors_are_invalid_params(make_access):
    access = await make_access(tools=("gated_job",))
    session = await Session(access).open()
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        await session.error(method, {"taskId": "no-such-task"}, INVALID_PARAMS)
        await session.error(method, {}, INVALID_PARAMS)
    await session.error("tasks/list", {"cursor": "not-a-cursor"}, INVALID_PARAMS)


async def test_list_pages_newest_first(make_access, settings):
    settings.MCP_APP = {**settings.MCP_APP, "PAGE_SIZE": 2}
    access = await make_access(tools=("failing_job",))
    session = await Session(access).open()
    ids = [
        (await session.result("tools/call", {"name": "failing_job", "task": {}}))["task"]["taskId"] for _ in range(3)
    ]
    first = await session.result("tasks/list")
    assert [task["taskId"] for task in first["tasks"]] == ids[::-1][:2]
    second = await session.result("tasks/list", {"cursor": first["nextCursor"]})
    assert [task["taskId"] for task in second["tasks"]] == ids[:1]
    assert "nextCursor" not in second
    await settled()


async def test_the_admins_cancel_stops_a_task_and_answers_a_waiting_tasks_result(make_access, fresh_gate, orm):
    from mcp_app.models import ToolTask

    access = await make_access(tools=("gated_job",))
    session = await Session(access).open()
    task_id = (await session.result("tools/call", {"name": "gated_job", "task": {}}))["task"]["taskId"]
    await asyncio.wait_for(fresh_gate.gate.started.wait(), timeout=5)
    waiting = asyncio.ensure_future(session.send("tasks/result", {"taskId": task_id}))
    row = await orm(ToolTask.objects.get, task_id=task_id)
    assert await orm(durable.cancel_now, row) is True
    await asyncio.wait_for(fresh_gate.gate.cancelled.wait(), timeout=5)
    answer = await asyncio.wait_for(waiting, timeout=5)
    assert answer["error"]["code"] == INTERNAL_ERROR
    assert answer["error"]["data"] == {"taskId": task_id, "status": "cancelled"}
    await settled()
