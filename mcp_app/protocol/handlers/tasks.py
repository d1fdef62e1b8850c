"""The tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28): ``tasks/get``, ``tasks/update``,
``tasks/cancel``, for clients that declare the extension on the request (-32021 otherwise). A task id the caller
does not own, or that expired, is -32602. Whether a ``tools/call`` becomes a task is the runtime's
(``mcp_app.runtime.tasks``); ``tasks/result`` and ``tasks/list`` do not exist in this revision (-32601).
"""

from __future__ import annotations

from typing import Any

from ..dispatcher import MessageContext
from ..errors import InvalidParams, MissingRequiredClientCapability
from ..modern import TASKS_EXTENSION
from .base import dispatcher, required_string
from .lifecycle import MODERN_ONLY

REQUIRED: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


def _task_id(params: dict[str, Any], message: MessageContext) -> str:
    if not message.request.client_declares_extension(TASKS_EXTENSION):
        raise MissingRequiredClientCapability(REQUIRED, f"This method needs the {TASKS_EXTENSION} extension")
    return required_string(params, "taskId")


def _unknown(task_id: str) -> InvalidParams:
    return InvalidParams(f"Unknown task: {task_id}", data={"taskId": task_id})


@dispatcher.request("tasks/get", eras=MODERN_ONLY)
async def get_task(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    task_id = _task_id(params, message)
    task = await message.request.tasks.get(task_id)
    if task is None:
        raise _unknown(task_id)
    return {"resultType": "complete", **task}


@dispatcher.request("tasks/update", eras=MODERN_ONLY)
async def update_task(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    task_id = _task_id(params, message)
    responses = params.get("inputResponses")
    if not isinstance(responses, dict):
        raise InvalidParams('Invalid params: "inputResponses" must be an object')
    if not await message.request.tasks.update(task_id, responses):
        raise _unknown(task_id)
    return {"resultType": "complete"}


@dispatcher.request("tasks/cancel", eras=MODERN_ONLY)
async def cancel_task(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    task_id = _task_id(params, message)
    if not await message.request.tasks.cancel(task_id):
        raise _unknown(task_id)
    return {"resultType": "complete"}
