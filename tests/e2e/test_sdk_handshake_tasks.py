"""The official MCP Python SDK (``mcp`` 2.3.0, ``mode="legacy"``) reading mcp-host's 2025-11-25 task objects.

The SDK has the revision's task types (``ServerCapabilities.tasks``, ``Tool.execution``, ``Task``,
``CreateTaskResult``, the ``tasks/*`` requests and results) but no client flow for them: its per-version method
map leaves ``tasks/*`` out on purpose (``mcp_types.methods``: "2025-11-25 (tasks/* deliberately absent)") and
``tools/call`` results are validated as ``CallToolResult`` only, so it cannot create a task. So the SDK
negotiates the session and parses what the server advertises; the task is created over plain HTTP in the SDK's
own session; and the SDK's typed requests (``GetTaskRequest``, ``GetTaskPayloadRequest``, ``ListTasksRequest``,
``CancelTaskRequest``) read it back into its models, which must accept every field mcp-host sends.

The experimental tasks *client* flow of an official SDK is the TypeScript one (``test_ts_sdk_client.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_app.protocol.errors import INVALID_PARAMS
from mcp_app.protocol.versions import V2025_11_25
from tests.conftest import Access

pytestmark = pytest.mark.e2e

WAIT_SECONDS = 10.0


@pytest.fixture
def task_tools_access(transactional_db: None, access_factory: Callable[..., Access]) -> Access:
    return access_factory(tools=("slow_compute", "failing_job", "greet"))


async def test_python_sdk_parses_capabilities_tools_and_task_objects(
    daphne_url: str, task_tools_access: Access
) -> None:
    access = task_tools_access
    url = f"{daphne_url}{access.path}?{access.query}"
    session_ids: list[str] = []

    async def remember(response: httpx2.Response) -> None:
        if response.headers.get("mcp-session-id"):
            session_ids.append(response.headers["mcp-session-id"])

    headers = {"Authorization": f"Bearer {access.raw_token}"}
    async with (
        asyncio.timeout(WAIT_SECONDS * 3),
        httpx2.AsyncClient(headers=headers, event_hooks={"response": [remember]}, timeout=WAIT_SECONDS) as http2,
        Client(
            streamable_http_client(url, http_client=http2), mode="legacy", read_timeout_seconds=WAIT_SECONDS
        ) as client,
    ):
        assert client.protocol_version == V2025_11_25
        tasks = client.server_capabilities.tasks
        assert tasks is not None and tasks.list is not None and tasks.cancel is not None
        assert tasks.requests is not None and tasks.requests.tools is not None and tasks.requests.tools.call is not None
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["slow_compute"].execution is not None
        assert tools["slow_compute"].execution.task_support == "optional"
        assert tools["failing_job"].execution is not None
        assert tools["failing_job"].execution.task_support == "required"
        assert tools["greet"].execution is None

        # The task, created in the SDK's session over plain HTTP (the SDK cannot send task-augmented calls).
        async with httpx.AsyncClient(timeout=WAIT_SECONDS) as http:
            created_raw = await http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": "create",
                    "method": "tools/call",
                    "params": {
                        "name": "slow_compute",
                        "arguments": {"seconds": 1, "label": "py"},
                        "task": {"ttl": 60000},
                    },
                },
                headers={
                    **headers,
                    "Accept": "application/json, text/event-stream",
                    "Mcp-Session-Id": session_ids[0],
                    "MCP-Protocol-Version": V2025_11_25,
                },
            )
        created = types.CreateTaskResult.model_validate(created_raw.json()["result"])
        assert created.task.status == "working" and created.task.ttl == 60000
        task_id = created.task.task_id

        session = client.session
        got = await session.send_request(
            types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
        )
        assert got.task_id == task_id and got.status in ("working", "completed")
        assert got.created_at == created.task.created_at
        result = await session.send_request(
            types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
            types.CallToolResult,
        )
        assert result.is_error is not True
        assert [block.text for block in result.content if isinstance(block, types.TextContent)] == [
            "slow_compute 'py' finished after 1s"
        ]
        assert result.meta is not None
        assert result.meta["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        listed = await session.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert [(task.task_id, task.status) for task in listed.tasks] == [(task_id, "completed")]
        with pytest.raises(MCPError) as refused:
            await session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)), types.CancelTaskResult
            )
        assert refused.value.error.code == INVALID_PARAMS
