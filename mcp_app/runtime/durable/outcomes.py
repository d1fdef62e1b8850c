"""A durable call's outcome and the record's columns, both ways, written once.

- ``columns(outcome)``: how a finished call settles its record (``ToolTask``): a result dict, a
  ``ProtocolError`` or another exception becomes ``status`` and the columns that go with it (``result``,
  ``error``, ``input_requests``, ``request_state``, ``status_message``, ``finished_at`` when terminal). The
  2025-11-25 era (``handshake=True``) reads a tool's ``isError`` result as a ``failed`` task, reports invalid
  arguments in the result (SEP-1303) and has no session-less ``input_required``; the 2026 extension and worker
  calls keep an ``isError`` result ``completed``. ``keep_answer``: an ``input_required`` answer is kept whole in
  ``result`` (a worker call's awaiting process returns it as it was).
- ``settled(record)``: it holds an outcome (terminal, or parked waiting for input); ``terminal(record)``: final.
- ``outcome_of(record)``: a settled record back into what a runner returns (a result dict) or raises (its
  ``ProtocolError``).
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ...models import ToolTask
from ...models.tasks import TERMINAL
from ...protocol.context import InvalidToolArguments
from ...protocol.errors import InternalError, ProtocolError
from ...protocol.messages import failed_call
from ..mrtr import PARK


def _first_text(result: dict[str, Any]) -> str:
    for block in result.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
    return ""


def columns(outcome: Any, *, handshake: bool = False, tool_name: str = "", keep_answer: bool = False) -> dict[str, Any]:
    """The columns that settle a record with ``outcome`` (see the module docstring)."""
    if handshake and isinstance(outcome, InvalidToolArguments):
        outcome = failed_call(f"Invalid arguments for tool {tool_name}: {outcome}")
    if handshake and isinstance(outcome, dict) and outcome.get("resultType") == "input_required":
        # A tool asking for input the stateless way, where no session can carry the question.
        outcome = failed_call(
            f"Tool {tool_name} needs input from the client, which this task has no session to ask for"
        )
    fields: dict[str, Any]
    if isinstance(outcome, ProtocolError):
        fields = {"status": ToolTask.Status.FAILED, "error": outcome.to_wire(), "status_message": outcome.message[:500]}
    elif isinstance(outcome, BaseException):
        fields = {
            "status": ToolTask.Status.FAILED,
            "error": InternalError().to_wire(),
            "status_message": "Internal error",
        }
    elif outcome.get("resultType") == "input_required":
        fields = {
            "status": ToolTask.Status.INPUT_REQUIRED,
            "input_requests": outcome.get("inputRequests") or {},
            "request_state": outcome.get("requestState") or "",
            "input_responses": {},
            "status_message": "Waiting for input",
        }
        if keep_answer:
            fields["result"] = dict(outcome)
        return fields
    else:
        result = {key: value for key, value in outcome.items() if key not in ("resultType", PARK)}
        if handshake and result.get("isError"):
            message = f"Tool execution failed: {_first_text(result)}".rstrip(": ")
            fields = {"status": ToolTask.Status.FAILED, "result": result, "status_message": message[:500]}
        else:
            fields = {"status": ToolTask.Status.COMPLETED, "result": result, "status_message": ""}
    fields["finished_at"] = timezone.now()
    return fields


def terminal(record: ToolTask) -> bool:
    """Whether the record is final (a 2025-11-25 task's ``input_required`` is not: its session answers it)."""
    return record.status in TERMINAL


def settled(record: ToolTask) -> bool:
    """Whether the record holds an outcome (terminal, or parked waiting for input)."""
    return record.status in TERMINAL or record.status == ToolTask.Status.INPUT_REQUIRED


def outcome_of(record: ToolTask) -> dict[str, Any]:
    """What the runner returns for a settled record; raises its error (a ProtocolError)."""
    if record.status == ToolTask.Status.COMPLETED:
        return dict(record.result or {"content": []})
    if record.status == ToolTask.Status.INPUT_REQUIRED:
        result = dict(record.result or {})
        if not result:
            result = {"resultType": "input_required", "inputRequests": record.input_requests or {}}
            if record.request_state:
                result["requestState"] = record.request_state
        return result
    if record.status == ToolTask.Status.CANCELLED:
        raise InternalError(record.status_message or "The call was cancelled")
    error = record.error if isinstance(record.error, dict) else {}
    raise ProtocolError(
        str(error.get("message") or record.status_message or "Internal error"),
        error.get("data"),
        code=int(error.get("code", InternalError.code)),
    )


def strip_internal(result: dict[str, Any]) -> dict[str, Any]:
    """A result without the runtime's internal markers (``PARK``), for a caller that is not a task."""
    result.pop(PARK, None)
    return result
