"""The 2025-11-25 experimental tasks: ``tasks/get``, ``tasks/result``, ``tasks/list`` and ``tasks/cancel``.

Only 2025-11-25 has them (-32601 on earlier revisions; the stateless era has its own, ``handlers.tasks``). A task
id the caller does not own, that expired or never existed is -32602, as are an invalid ``tasks/list`` cursor and
cancelling a terminal task. ``tasks/result`` waits until the task is terminal, then answers exactly what the call
would have: its result with the related-task ``_meta``, or its JSON-RPC error.
"""

from __future__ import annotations

from typing import Any

from .. import handshake_tasks
from ..context import HandshakeTasks
from ..dispatcher import MessageContext
from ..errors import InvalidParams, MethodNotFound
from .base import dispatcher, required_string
from .lifecycle import LEGACY_ONLY


def _service(message: MessageContext, method: str) -> HandshakeTasks:
    ctx = message.request
    if not ctx.handshake_tasks.available or not handshake_tasks.has_tasks(ctx.protocol_version):
        raise MethodNotFound(f"Method not found: {method}")
    return ctx.handshake_tasks


def _known(task: dict[str, Any] | None, task_id: str) -> dict[str, Any]:
    if task is None:
        raise InvalidParams(f"Failed to retrieve task: Task not found: {task_id}", data={"taskId": task_id})
    return task


@dispatcher.request("tasks/get", eras=LEGACY_ONLY)
async def get_task(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    service = _service(message, "tasks/get")
    task_id = required_string(params, "taskId")
    return _known(await service.get(message.request, task_id), task_id)


@dispatcher.request("tasks/result", eras=LEGACY_ONLY)
async def task_result(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    service = _service(message, "tasks/result")
    task_id = required_string(params, "taskId")
    return _known(await service.result(message.request, task_id), task_id)


@dispatcher.request("tasks/list", eras=LEGACY_ONLY)
async def list_tasks(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    service = _service(message, "tasks/list")
    return await service.list(message.request, params.get("cursor"))


@dispatcher.request("tasks/cancel", eras=LEGACY_ONLY)
async def cancel_task(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    service = _service(message, "tasks/cancel")
    task_id = required_string(params, "taskId")
    return _known(await service.cancel(message.request, task_id), task_id)
