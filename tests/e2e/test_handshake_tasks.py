"""2025-11-25 experimental tasks at the wire, against a real daphne process (SQLite alone, or PostgreSQL + Redis).

Expected values are the spec's (``spec/2025-11-25/basic/utilities/tasks.mdx``, ``schema/2025-11-25/schema.ts``):

- ``initialize`` advertises ``capabilities.tasks`` = ``{list, cancel, requests: {tools: {call}}}`` and
  ``tools/list`` shows ``execution.taskSupport`` of task-capable tools;
- a ``tools/call`` with ``params.task`` answers ``{task}`` at once, ``working``, and the task then completes;
  ``tasks/result`` blocks until then and answers the tool's result with the related-task ``_meta``;
- a tool error (``isError``) fails the task, and ``tasks/result`` still answers that result;
- ``tasks/list`` shows only the caller's tasks (two agents of one tenant, and an agent of another tenant);
- ``tasks/cancel`` on a running task answers it ``cancelled`` and stops the tool (its progress stops short of
  the end, while a twin started later runs to completion); cancelling a terminal task is -32602;
- unknown ids, and other agents' ids, are -32602; ``task`` on a tool whose taskSupport is forbidden, or none on
  a required one, is -32601;
- ``notifications/tasks/status`` (no related-task ``_meta``) and the task's progress (with it) reach the
  session's GET stream; so does a task's elicitation request (with it), the task ``input_required`` until the
  client's answer (POSTed, 202) lets it resume and complete;
- the stateless era keeps ``tasks/list`` and ``tasks/result`` unknown (404, -32601), as seed 004 and the suite
  expect.

The tools are the conformance fixtures the daphne process has (``slow_compute``: optional, ``failing_job``:
required, ``greet``: forbidden, ``confirm_delete``: required, asks for confirmation) and a static tool ``ticker`` made here (optional, progress over a delay).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from mcp_app.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_app.protocol.versions import V2025_11_25
from tests.conftest import Access
from tests.helpers import READ_TIMEOUT_SECONDS, SseFrame, auth_headers, endpoint, post_headers, sse_frames

pytestmark = pytest.mark.e2e

RELATED = "io.modelcontextprotocol/related-task"
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
TASK_KEYS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
TICKER_STEPS = 20
TICKER_DELAY_MS = 2000
TOOLS = ("slow_compute", "failing_job", "greet", "echo", "confirm_delete")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=READ_TIMEOUT_SECONDS) as client:
        yield client


def add_ticker(server: Any, tool_factory: Callable[..., Any]) -> None:
    tool_factory(
        server,
        "ticker",
        position=len(TOOLS),
        kind="static",
        task_support="optional",
        static_result={"content": [{"type": "text", "text": "ticked"}]},
        static_delay_ms=TICKER_DELAY_MS,
        static_progress_steps=TICKER_STEPS,
    )


@pytest.fixture
def task_access(transactional_db: None, access_factory: Callable[..., Access], tool_factory: Any) -> Access:
    access = access_factory(tools=TOOLS)
    add_ticker(access.server, tool_factory)
    return access


@dataclass
class Peers:
    """Two agents of one tenant on one server, and an agent of another tenant on that tenant's server."""

    first: Access
    second: Access
    stranger: Access


@pytest.fixture
def peers(
    transactional_db: None, access_factory: Callable[..., Access], agent_factory: Any, token_factory: Any
) -> Peers:
    first = access_factory(tools=TOOLS)
    agent = agent_factory(tenant=first.tenant)
    token, raw = token_factory(agent=agent, servers=[first.server])
    second = Access(tenant=first.tenant, server=first.server, agent=agent, token=token, raw_token=raw)
    return Peers(first=first, second=second, stranger=access_factory(tools=TOOLS))


@dataclass
class Session:
    """One 2025-11-25 session over HTTP: JSON-RPC in, the response object out (JSON or the SSE stream's last)."""

    http: httpx.AsyncClient
    url: str
    access: Access
    session_id: str = ""
    capabilities: dict[str, Any] = field(default_factory=dict)
    next_id: int = 1

    def headers(self, **extra: str) -> dict[str, str]:
        return post_headers(
            self.access, **{"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": V2025_11_25, **extra}
        )

    async def open(self, capabilities: dict[str, Any] | None = None) -> Session:
        # By default the client declares no capabilities at all: creating tasks needs only the server's.
        response = await self.http.post(
            self.url,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": V2025_11_25,
                    "capabilities": capabilities or {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            headers=post_headers(self.access),
        )
        assert response.status_code == 200
        body = response.json()
        assert body["result"]["protocolVersion"] == V2025_11_25
        self.capabilities = body["result"]["capabilities"]
        self.session_id = response.headers["mcp-session-id"]
        initialized = await self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers()
        )
        assert initialized.status_code == 202
        return self

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        response = await self.http.post(self.url, json=message, headers=self.headers())
        assert response.status_code == 200, response.text
        if response.headers["content-type"].startswith("text/event-stream"):
            frames = [frame for frame in _frames(response.text) if frame.data]
            answer = frames[-1].message
        else:
            answer = response.json()
        assert answer["id"] == self.next_id
        return answer

    async def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self.send(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def error(self, method: str, params: dict[str, Any] | None, code: int) -> dict[str, Any]:
        answer = await self.send(method, params)
        assert "error" in answer, answer
        assert answer["error"]["code"] == code, answer
        return answer["error"]

    async def start(self, name: str, arguments: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
        created = await self.result("tools/call", {"name": name, "arguments": arguments or {}, "task": {}, **params})
        assert set(created) == {"task"}, created
        check_task(created["task"], "working")
        return created["task"]

    @asynccontextmanager
    async def stream(self) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """The session's GET stream, joined (``: ready`` read): its JSON-RPC messages, one at a time."""
        async with self.http.stream(
            "GET",
            self.url,
            headers=auth_headers(
                self.access,
                Accept="text/event-stream",
                **{"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": V2025_11_25},
            ),
        ) as response:
            assert response.status_code == 200
            frames = sse_frames(response)

            async def messages() -> AsyncIterator[dict[str, Any]]:
                async for frame in frames:
                    if frame.data:
                        yield frame.message

            async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                async for frame in frames:
                    if "ready" in frame.comments:
                        break
            yield messages()


def _frames(text: str) -> list[SseFrame]:
    from tests.helpers import parse_frame

    return [parse_frame(raw) for raw in text.replace("\r\n", "\n").split("\n\n") if raw.strip()]


def check_task(task: dict[str, Any], status: str) -> None:
    assert task["status"] == status, task
    assert set(task) <= TASK_KEYS and {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl"} <= set(task)
    assert isinstance(task["taskId"], str) and len(task["taskId"]) >= 32  # unguessable: 24 random bytes
    assert ISO.match(task["createdAt"]) and ISO.match(task["lastUpdatedAt"])
    assert isinstance(task["ttl"], int) and task["ttl"] > 0
    assert RELATED not in task.get("_meta", {})


async def next_message(
    messages: AsyncIterator[dict[str, Any]], predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    async with asyncio.timeout(READ_TIMEOUT_SECONDS):
        async for message in messages:
            if predicate(message):
                return message
    raise AssertionError("the stream ended")


def status_of(task_id: str, status: str) -> Callable[[dict[str, Any]], bool]:
    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != "notifications/tasks/status":
            return False
        return (message["params"]["taskId"], message["params"]["status"]) == (task_id, status)

    return matches


async def test_initialize_advertises_tasks_and_tools_list_shows_task_support(
    daphne_url: str, task_access: Access, http: httpx.AsyncClient
) -> None:
    session = await Session(http, endpoint(daphne_url, task_access), task_access).open()

    assert session.capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    tools = {tool["name"]: tool for tool in (await session.result("tools/list"))["tools"]}
    assert tools["slow_compute"]["execution"] == {"taskSupport": "optional"}
    assert tools["failing_job"]["execution"] == {"taskSupport": "required"}
    assert tools["ticker"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["greet"] and "execution" not in tools["echo"]


async def test_a_task_is_working_then_completed_and_tasks_result_blocks_for_it(
    daphne_url: str, task_access: Access, http: httpx.AsyncClient
) -> None:
    session = await Session(http, endpoint(daphne_url, task_access), task_access).open()

    async with session.stream() as messages:
        task = await session.start("slow_compute", {"seconds": 1, "label": "e2e"}, task={"ttl": 60000})
        assert task["ttl"] == 60000
        check_task(await session.result("tasks/get", {"taskId": task["taskId"]}), "working")
        waiting = asyncio.ensure_future(session.result("tasks/result", {"taskId": task["taskId"]}))
        notified = await next_message(messages, status_of(task["taskId"], "completed"))
        result = await asyncio.wait_for(waiting, timeout=READ_TIMEOUT_SECONDS)

    assert result["content"] == [{"type": "text", "text": "slow_compute 'e2e' finished after 1s"}]
    assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
    check_task(notified["params"], "completed")
    assert "_meta" not in notified["params"]  # the task id is in the params already
    done = await session.result("tasks/get", {"taskId": task["taskId"]})
    check_task(done, "completed")
    assert done["createdAt"] == task["createdAt"]


async def test_a_tool_error_fails_the_task_and_tasks_result_answers_the_is_error_result(
    daphne_url: str, task_access: Access, http: httpx.AsyncClient
) -> None:
    session = await Session(http, endpoint(daphne_url, task_access), task_access).open()

    task = await session.start("failing_job")
    result = await session.result("tasks/result", {"taskId": task["taskId"]})

    assert result["isError"] is True
    assert result["content"][0] == {"type": "text", "text": "failing_job failed on purpose"}
    assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
    failed = await session.result("tasks/get", {"taskId": task["taskId"]})
    check_task(failed, "failed")
    assert failed["statusMessage"] == "Tool execution failed: failing_job failed on purpose"


async def test_cancel_stops_a_running_task_and_a_terminal_one_cannot_be_cancelled(
    daphne_url: str, task_access: Access, http: httpx.AsyncClient
) -> None:
    session = await Session(http, endpoint(daphne_url, task_access), task_access).open()
    progress: dict[str, list[float]] = {}

    def record(message: dict[str, Any]) -> None:
        if message.get("method") == "notifications/progress":
            task_id = message["params"]["_meta"][RELATED]["taskId"]
            progress.setdefault(task_id, []).append(message["params"]["progress"])

    async with session.stream() as messages:
        doomed = await session.start("ticker", _meta={"progressToken": "doomed"})

        def tracking(predicate: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
            def check(message: dict[str, Any]) -> bool:
                record(message)
                return predicate(message)

            return check

        # It runs: its first progress notification (with the related task) reaches the GET stream.
        await next_message(messages, tracking(lambda message: bool(progress.get(doomed["taskId"]))))
        cancelled = await session.result("tasks/cancel", {"taskId": doomed["taskId"]})
        check_task(cancelled, "cancelled")
        # A twin started after the cancellation runs to its end; had the first one gone on, it would be done too.
        twin = await session.start("ticker", _meta={"progressToken": "twin"})
        await next_message(messages, tracking(status_of(twin["taskId"], "completed")))

    assert len(progress[twin["taskId"]]) == TICKER_STEPS
    assert len(progress[doomed["taskId"]]) < TICKER_STEPS, "the cancelled tool went on to its end"
    check_task(await session.result("tasks/get", {"taskId": doomed["taskId"]}), "cancelled")
    refused = await session.error("tasks/cancel", {"taskId": doomed["taskId"]}, INVALID_PARAMS)
    assert refused["message"] == "Cannot cancel task: already in terminal status 'cancelled'"
    await session.error("tasks/cancel", {"taskId": twin["taskId"]}, INVALID_PARAMS)


async def test_tasks_list_shows_only_the_callers_tasks_and_others_ids_are_unknown(
    daphne_url: str, peers: Peers, http: httpx.AsyncClient
) -> None:
    sessions = {
        name: await Session(http, endpoint(daphne_url, access), access).open()
        for name, access in (("first", peers.first), ("second", peers.second), ("stranger", peers.stranger))
    }
    mine = {name: [] for name in sessions}
    for name, session in sessions.items():
        for _ in range(2 if name == "first" else 1):
            mine[name].append((await session.start("failing_job"))["taskId"])

    for name, session in sessions.items():
        listed = await session.result("tasks/list")
        assert sorted(task["taskId"] for task in listed["tasks"]) == sorted(mine[name]), name
        assert "nextCursor" not in listed
        for task in listed["tasks"]:
            check_task(task, task["status"])
    # A new session of the same agent (the authorization context) sees the same tasks.
    again = await Session(http, endpoint(daphne_url, peers.first), peers.first).open()
    assert sorted(task["taskId"] for task in (await again.result("tasks/list"))["tasks"]) == sorted(mine["first"])
    foreign = mine["first"][0]
    for name in ("second", "stranger"):
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            await sessions[name].error(method, {"taskId": foreign}, INVALID_PARAMS)
    await sessions["first"].result("tasks/result", {"taskId": foreign})  # the owner still can


async def test_unknown_ids_bad_cursors_and_tool_level_negotiation(
    daphne_url: str, task_access: Access, http: httpx.AsyncClient
) -> None:
    session = await Session(http, endpoint(daphne_url, task_access), task_access).open()

    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        error = await session.error(method, {"taskId": "no-such-task"}, INVALID_PARAMS)
        assert "Task not found" in error["message"]
    await session.error("tasks/list", {"cursor": "bogus"}, INVALID_PARAMS)
    # taskSupport forbidden (absent): a task is refused; required: a plain call is refused. Both -32601.
    await session.error("tools/call", {"name": "greet", "arguments": {"name": "x"}, "task": {}}, METHOD_NOT_FOUND)
    await session.error("tools/call", {"name": "failing_job", "arguments": {}}, METHOD_NOT_FOUND)
    # An optional tool may also be called plainly.
    plain = await session.result("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "p"}})
    assert plain["content"] == [{"type": "text", "text": "slow_compute 'p' finished after 0s"}]


async def test_the_stateless_era_has_no_tasks_list_or_tasks_result(
    daphne_url: str, task_access: Access, http: httpx.AsyncClient
) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }
    for method, params in (("tasks/list", {}), ("tasks/result", {"taskId": "x"})):
        headers = post_headers(task_access, **{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method})
        if "taskId" in params:
            headers["Mcp-Name"] = params["taskId"]
        response = await http.post(
            endpoint(daphne_url, task_access),
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}},
            headers=headers,
        )
        assert response.status_code == 404, method
        assert response.json()["error"]["code"] == METHOD_NOT_FOUND


async def test_a_task_asks_for_input_on_the_get_stream_and_resumes_with_the_answer(
    daphne_url: str, task_access: Access, http: httpx.AsyncClient
) -> None:
    session = await Session(http, endpoint(daphne_url, task_access), task_access).open({"elicitation": {}})

    async with session.stream() as messages:
        task = await session.start("confirm_delete", {"filename": "notes.txt"})
        parked = await next_message(messages, status_of(task["taskId"], "input_required"))
        ask = await next_message(messages, lambda message: message.get("method") == "elicitation/create")
        assert ask["params"]["_meta"][RELATED] == {"taskId": task["taskId"]}
        assert ask["params"]["message"] == "Delete notes.txt?"
        check_task(await session.result("tasks/get", {"taskId": task["taskId"]}), "input_required")
        answered = await http.post(
            session.url,
            json={"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirm": True}}},
            headers=session.headers(),
        )
        assert answered.status_code == 202
        await next_message(messages, status_of(task["taskId"], "working"))
        await next_message(messages, status_of(task["taskId"], "completed"))

    check_task(parked["params"], "input_required")
    result = await session.result("tasks/result", {"taskId": task["taskId"]})
    assert result["content"] == [{"type": "text", "text": "Deleted notes.txt"}]
