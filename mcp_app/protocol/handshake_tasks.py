"""The wire forms of the 2025-11-25 experimental tasks (``spec/2025-11-25/basic/utilities/tasks.mdx``), each
defined once. Pure Python. The 2026-07-28 tasks extension (``modern.TASKS_EXTENSION``) has other shapes
(``resultType: "task"``, ``ttlMs``, results inlined on ``tasks/get``) and lives in the runtime's task service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import messages, pagination, versions
from .errors import InvalidParams

RELATED_TASK = "io.modelcontextprotocol/related-task"
STATUS_NOTIFICATION = "notifications/tasks/status"
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
# The methods this revision adds; they do not exist before it (-32601) nor in 2026-07-28 (another shape, or gone).
METHODS = ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel")

_CURSOR_PREFIX = "mcp-tasks:"


def has_tasks(protocol_version: str) -> bool:
    """Whether a handshake-era revision defines task-augmented requests (2025-11-25 only)."""
    return protocol_version == versions.V2025_11_25


def server_capability() -> dict[str, Any]:
    """``capabilities.tasks``: ``tasks/list``, ``tasks/cancel`` and task-augmented ``tools/call``."""
    return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def tool_execution(task_support: str) -> dict[str, Any] | None:
    """``Tool.execution``; ``None`` (the field left out) for ``forbidden``, the default."""
    if task_support in ("optional", "required"):
        return {"taskSupport": task_support}
    return None


def requested_ttl(params: Mapping[str, Any]) -> tuple[bool, int | None]:
    """Whether ``tools/call`` params ask for a task, and the ``ttl`` (ms) asked for, if any; -32602 if malformed."""
    if "task" not in params or params["task"] is None:
        return False, None
    task = params["task"]
    if not isinstance(task, dict):
        raise InvalidParams('Invalid params: "task" must be an object')
    ttl = task.get("ttl")
    if ttl is None:
        return True, None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl < 0 or ttl != int(ttl):
        raise InvalidParams('Invalid params: "task.ttl" must be a non-negative integer (milliseconds)')
    return True, int(ttl)


@dataclass(frozen=True, slots=True)
class TaskState:
    """What the wire shows of one task; timestamps already ISO 8601 (UTC)."""

    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None
    status_message: str = ""


def task(state: TaskState) -> dict[str, Any]:
    """The ``Task`` object: the body of ``tasks/get`` and ``tasks/cancel`` results, of ``tasks/list`` entries and
    of ``notifications/tasks/status`` params."""
    wire: dict[str, Any] = {"taskId": state.task_id, "status": state.status}
    if state.status_message:
        wire["statusMessage"] = state.status_message
    wire["createdAt"] = state.created_at
    wire["lastUpdatedAt"] = state.last_updated_at
    wire["ttl"] = state.ttl_ms
    if state.poll_interval_ms is not None:
        wire["pollInterval"] = state.poll_interval_ms
    return wire


def create_task_result(state: TaskState) -> dict[str, Any]:
    """The answer to a task-augmented request: ``{task: Task}``."""
    return {"task": task(state)}


def status_notification(state: TaskState) -> dict[str, Any]:
    """``notifications/tasks/status`` with the full task (and no related-task ``_meta``, as the spec asks)."""
    return messages.notification(STATUS_NOTIFICATION, task(state))


def with_related_task(message_params: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    """``message_params`` (a result, e.g. a ``tasks/result`` answer, or a request's or notification's params)
    with the related-task ``_meta``."""
    out = dict(message_params)
    meta = out.get("_meta")
    out["_meta"] = {**(meta if isinstance(meta, dict) else {}), RELATED_TASK: {"taskId": task_id}}
    return out


def encode_cursor(position: int) -> str:
    return pagination.encode_cursor(position, _CURSOR_PREFIX)


def decode_cursor(cursor: Any) -> int | None:
    """The position a ``tasks/list`` cursor names (``None``: the first page); -32602 for anything else."""
    return None if cursor is None else pagination.decode_cursor(cursor, _CURSOR_PREFIX)
