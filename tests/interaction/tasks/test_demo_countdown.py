"""The demo's ``countdown`` (``mcp_app.contrib.demo``) is a task for a client that declares tasks, in both eras,
bound to a worker (its default; in-process here) and inline, as the README tells. Driven through the project's
own pytest plugin (``mcp_app.testing``), as a project testing its tools would."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import TASKS, settled, wait_until

RELATED = "io.modelcontextprotocol/related-task"
DECLARING = {"_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}}

pytestmark = pytest.mark.usefixtures("worker_calls_drained")


@pytest.fixture
def mcp_tools() -> list[str]:
    return ["countdown"]


@pytest.fixture(params=["", "inline"], ids=["worker", "inline"])
def execution(request: pytest.FixtureRequest, mcp_server: Any, settings: Any) -> Any:
    """The binding's execution: "" keeps the tool's own (``worker``), run in-process even with a broker."""
    from mcp_app.models import ServerTool

    settings.MCP_APP = {**settings.MCP_APP, "WORKER_DISPATCH": "in_process"}
    ServerTool.objects.filter(server=mcp_server).update(execution=request.param)
    return request.param


@pytest.fixture(autouse=True)
async def tasks_settled() -> Any:
    """Inline tasks run on in this test's event loop after their answer: let them end before it closes."""
    yield
    await settled()


async def test_a_task_augmented_countdown_is_a_task_in_the_handshake_era(mcp_client: Any, execution: str) -> None:
    await mcp_client.initialize()
    [listed] = await mcp_client.list_tools()
    assert listed["execution"] == {"taskSupport": "optional"}
    arguments = {"steps": 2, "interval_ms": 10}
    created = await mcp_client.result("tools/call", {"name": "countdown", "arguments": arguments, "task": {}})
    assert set(created) == {"task"} and created["task"]["status"] == "working"
    task_id = created["task"]["taskId"]
    result = await mcp_client.result("tasks/result", {"taskId": task_id})  # waits until the task is terminal
    assert result["structuredContent"] == {"result": 2}
    assert result["_meta"][RELATED] == {"taskId": task_id}
    assert (await mcp_client.result("tasks/get", {"taskId": task_id}))["status"] == "completed"


async def test_a_countdown_that_does_not_finish_at_once_is_a_task_in_the_2026_era(
    mcp_modern_client: Any, execution: str
) -> None:
    arguments = {"steps": 10, "interval_ms": 100}  # 1 s: longer than TASK_IMMEDIATE_SECONDS (0.2 s)
    created = await mcp_modern_client.result("tools/call", {"name": "countdown", "arguments": arguments, **DECLARING})
    assert created["resultType"] == "task" and created["status"] == "working"

    async def completed() -> Any:
        got = await mcp_modern_client.result("tasks/get", {"taskId": created["taskId"], **DECLARING})
        return got if got["status"] == "completed" else None

    done = await wait_until(completed, timeout=20, interval=0.05, what="the countdown task completing")
    assert done["result"]["structuredContent"] == {"result": 10}


async def test_a_client_that_does_not_declare_tasks_gets_the_result(mcp_modern_client: Any, execution: str) -> None:
    result = await mcp_modern_client.call_tool("countdown", {"steps": 3, "interval_ms": 0})
    assert result["resultType"] == "complete"
    assert result["structuredContent"] == {"result": 3}
