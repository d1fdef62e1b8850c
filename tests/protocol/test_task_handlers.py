"""The task handlers of both eras (``handlers.tasks``, 2026-07-28; ``handlers.handshake_tasks``, 2025-11-25)
against in-memory task services, without a database: which era and revision has which method, the extension a
2026 client must declare, the parameters checked, and that an unknown task is -32602 with its id. Codes are
asserted against ``mcp_app.protocol.errors``; the task services themselves are tested in
``tests/interaction/tasks/``."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from mcp_app.protocol import handshake_tasks, versions
from mcp_app.protocol.context import RequestContext
from mcp_app.protocol.errors import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)
from mcp_app.protocol.modern import TASKS_EXTENSION

MakeCtx = Callable[..., RequestContext]
Rpc = Callable[..., Awaitable[Any]]
DECLARING = {"extensions": {TASKS_EXTENSION: {}}}
KNOWN = "t-known"


class MemoryTasks:
    """The 2026 ``Tasks`` port over a dict: one working task, ``KNOWN``."""

    available = True

    def __init__(self) -> None:
        self.tasks: dict[str, dict[str, Any]] = {KNOWN: {"taskId": KNOWN, "status": "working"}}
        self.updates: list[tuple[str, Mapping[str, Any]]] = []

    async def get(self, task_id: str) -> dict[str, Any] | None:
        return self.tasks.get(task_id)

    async def update(self, task_id: str, responses: Mapping[str, Any]) -> bool:
        if task_id not in self.tasks:
            return False
        self.updates.append((task_id, responses))
        return True

    async def cancel(self, task_id: str) -> bool:
        if task_id not in self.tasks:
            return False
        self.tasks[task_id]["status"] = "cancelled"
        return True


class MemoryHandshakeTasks:
    """The 2025-11-25 ``HandshakeTasks`` port over a dict: one working task, ``KNOWN``."""

    available = True

    def __init__(self) -> None:
        state = handshake_tasks.TaskState(KNOWN, "working", "2026-12-02T04:00:00Z", "2026-12-02T04:00:00Z", 1000)
        self.tasks = {KNOWN: state}

    async def get(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        state = self.tasks.get(task_id)
        return handshake_tasks.task(state) if state else None

    async def result(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        if task_id not in self.tasks:
            return None
        return handshake_tasks.with_related_task({"content": []}, task_id)

    async def list(self, ctx: RequestContext, cursor: Any) -> dict[str, Any]:
        handshake_tasks.decode_cursor(cursor)
        return {"tasks": [handshake_tasks.task(state) for state in self.tasks.values()]}

    async def cancel(self, ctx: RequestContext, task_id: str) -> dict[str, Any] | None:
        state = self.tasks.get(task_id)
        if state is None:
            return None
        self.tasks[task_id] = dataclasses.replace(state, status="cancelled")
        return handshake_tasks.task(self.tasks[task_id])


def modern_ctx(make_ctx: MakeCtx, capabilities: Mapping[str, Any] = DECLARING, **fields: Any) -> RequestContext:
    ctx = make_ctx(protocol_version=versions.V2026_07_28)
    return dataclasses.replace(ctx, era=versions.MODERN, client_capabilities=capabilities, **fields)


def error_code(response: dict[str, Any]) -> int:
    assert "result" not in response, response
    return response["error"]["code"]


# ------------------------------------------------------------------------------------- 2026-07-28


async def test_get_update_and_cancel_serve_a_declaring_client(make_ctx: MakeCtx, rpc: Rpc) -> None:
    tasks = MemoryTasks()
    ctx = modern_ctx(make_ctx, tasks=tasks)
    got = await rpc(ctx, "tasks/get", {"taskId": KNOWN})
    assert (got["result"]["resultType"], got["result"]["taskId"]) == ("complete", KNOWN)
    updated = await rpc(ctx, "tasks/update", {"taskId": KNOWN, "inputResponses": {"r1": {"action": "accept"}}})
    assert updated["result"]["resultType"] == "complete"
    assert tasks.updates == [(KNOWN, {"r1": {"action": "accept"}})]
    cancelled = await rpc(ctx, "tasks/cancel", {"taskId": KNOWN})
    assert cancelled["result"]["resultType"] == "complete"
    assert tasks.tasks[KNOWN]["status"] == "cancelled"


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_a_client_without_the_extension_is_told_which_one_it_needs(
    make_ctx: MakeCtx, rpc: Rpc, method: str
) -> None:
    response = await rpc(modern_ctx(make_ctx, {}, tasks=MemoryTasks()), method, {"taskId": KNOWN})
    assert error_code(response) == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert response["error"]["data"] == {"requiredCapabilities": DECLARING}


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
@pytest.mark.parametrize("task_id", [None, "", 7])
async def test_a_missing_or_malformed_task_id_is_invalid_params(
    make_ctx: MakeCtx, rpc: Rpc, method: str, task_id: Any
) -> None:
    params = {"inputResponses": {}} if task_id is None else {"taskId": task_id, "inputResponses": {}}
    assert error_code(await rpc(modern_ctx(make_ctx, tasks=MemoryTasks()), method, params)) == INVALID_PARAMS


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_an_unknown_task_is_invalid_params_naming_it(make_ctx: MakeCtx, rpc: Rpc, method: str) -> None:
    response = await rpc(modern_ctx(make_ctx, tasks=MemoryTasks()), method, {"taskId": "t-other", "inputResponses": {}})
    assert error_code(response) == INVALID_PARAMS
    assert response["error"]["data"] == {"taskId": "t-other"}


async def test_update_needs_an_object_of_responses(make_ctx: MakeCtx, rpc: Rpc) -> None:
    ctx = modern_ctx(make_ctx, tasks=MemoryTasks())
    for responses in (None, [], "yes"):
        response = await rpc(ctx, "tasks/update", {"taskId": KNOWN, "inputResponses": responses})
        assert error_code(response) == INVALID_PARAMS


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list"])
async def test_the_2025_methods_do_not_exist_in_2026(make_ctx: MakeCtx, rpc: Rpc, method: str) -> None:
    ctx = modern_ctx(make_ctx, tasks=MemoryTasks(), handshake_tasks=MemoryHandshakeTasks())
    assert error_code(await rpc(ctx, method, {"taskId": KNOWN})) == METHOD_NOT_FOUND


# ------------------------------------------------------------------------------------- 2025-11-25


def handshake_ctx(make_ctx: MakeCtx, version: str = versions.V2025_11_25) -> RequestContext:
    return dataclasses.replace(make_ctx(protocol_version=version), handshake_tasks=MemoryHandshakeTasks())


async def test_the_2025_11_25_methods_answer_with_the_task(make_ctx: MakeCtx, rpc: Rpc) -> None:
    ctx = handshake_ctx(make_ctx)
    got = (await rpc(ctx, "tasks/get", {"taskId": KNOWN}))["result"]
    assert (got["taskId"], got["status"]) == (KNOWN, "working")
    result = (await rpc(ctx, "tasks/result", {"taskId": KNOWN}))["result"]
    assert result["_meta"][handshake_tasks.RELATED_TASK] == {"taskId": KNOWN}
    listed = (await rpc(ctx, "tasks/list", {}))["result"]
    assert [task["taskId"] for task in listed["tasks"]] == [KNOWN]
    cancelled = (await rpc(ctx, "tasks/cancel", {"taskId": KNOWN}))["result"]
    assert cancelled["status"] == "cancelled"


@pytest.mark.parametrize("method", ["tasks/get", "tasks/result", "tasks/cancel"])
async def test_an_unknown_or_missing_task_id_is_invalid_params(make_ctx: MakeCtx, rpc: Rpc, method: str) -> None:
    ctx = handshake_ctx(make_ctx)
    unknown = await rpc(ctx, method, {"taskId": "t-other"})
    assert error_code(unknown) == INVALID_PARAMS
    assert unknown["error"]["data"] == {"taskId": "t-other"}
    assert error_code(await rpc(ctx, method, {})) == INVALID_PARAMS


async def test_a_foreign_cursor_is_invalid_params(make_ctx: MakeCtx, rpc: Rpc) -> None:
    assert error_code(await rpc(handshake_ctx(make_ctx), "tasks/list", {"cursor": "not-ours"})) == INVALID_PARAMS


@pytest.mark.parametrize("version", [v for v in versions.HANDSHAKE_VERSIONS if v != versions.V2025_11_25])
@pytest.mark.parametrize("method", handshake_tasks.METHODS)
async def test_earlier_revisions_do_not_have_the_methods(
    make_ctx: MakeCtx, rpc: Rpc, version: str, method: str
) -> None:
    response = await rpc(handshake_ctx(make_ctx, version), method, {"taskId": KNOWN})
    assert error_code(response) == METHOD_NOT_FOUND
