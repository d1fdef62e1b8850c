"""Gating of the tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28).

``tasks/get``, ``tasks/update`` and ``tasks/cancel`` exist only for clients that declare the extension
(-32021 otherwise, naming it). This server does not yet create tasks, so it never advertises the extension and
every task id is unknown (-32602); task ids will be checked against the caller on every call once they exist.
"""

from __future__ import annotations

from typing import Any

from ..dispatcher import MessageContext
from ..errors import InvalidParams, MissingRequiredClientCapability
from ..modern import TASKS_EXTENSION
from . import dispatcher
from .lifecycle import MODERN_ONLY


async def _task_method(params: dict[str, Any], message: MessageContext) -> dict[str, Any]:
    if not message.request.client_declares_extension(TASKS_EXTENSION):
        raise MissingRequiredClientCapability(
            {"extensions": {TASKS_EXTENSION: {}}}, f"This method needs the {TASKS_EXTENSION} extension"
        )
    task_id = params.get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise InvalidParams('Invalid params: "taskId" must be a non-empty string')
    raise InvalidParams(f"Unknown task: {task_id}", data={"taskId": task_id})


for _method in ("tasks/get", "tasks/update", "tasks/cancel"):
    dispatcher.request(_method, eras=MODERN_ONLY)(_task_method)
