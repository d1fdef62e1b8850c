"""``runtime.durable.outcomes``: an outcome becomes a record's columns and comes back out of them unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.models import ToolTask
from mcp_app.protocol.context import InvalidToolArguments
from mcp_app.protocol.errors import INTERNAL_ERROR, InternalError, InvalidParams, ProtocolError
from mcp_app.runtime.durable import columns, outcome_of, settled, strip_internal
from mcp_app.runtime.mrtr import PARK

RESULT = {"content": [{"type": "text", "text": "done"}]}
FAILED_RESULT = {"content": [{"type": "text", "text": "disk full"}], "isError": True}
ASKING = {"resultType": "input_required", "inputRequests": {"q": {"method": "elicitation/create"}}, "requestState": "s"}


def record_of(fields: dict[str, Any]) -> ToolTask:
    """The record ``fields`` settle (unsaved: the columns are what is stored)."""
    return ToolTask(task_id="t", tool_name="slow", arguments={}, ttl_ms=1000, **fields)


def test_a_result_completes_the_record_without_the_runtimes_markers() -> None:
    fields = columns({**RESULT, "resultType": "complete", PARK: True})
    assert fields["status"] == ToolTask.Status.COMPLETED and fields["finished_at"] is not None
    assert fields["result"] == RESULT
    assert outcome_of(record_of(fields)) == RESULT


@pytest.mark.parametrize(
    ("handshake", "status"), [(False, ToolTask.Status.COMPLETED), (True, ToolTask.Status.FAILED)], ids=["2026", "2025"]
)
def test_an_is_error_result_fails_only_a_2025_task(handshake: bool, status: str) -> None:
    fields = columns(FAILED_RESULT, handshake=handshake)
    assert fields["status"] == status and fields["result"] == FAILED_RESULT
    if handshake:
        assert fields["status_message"] == "Tool execution failed: disk full"


def test_a_protocol_error_is_kept_and_raised_again_as_it_was() -> None:
    error = InvalidParams("bad cursor", {"cursor": "x"})
    fields = columns(error)
    assert fields["status"] == ToolTask.Status.FAILED and fields["status_message"] == "bad cursor"
    with pytest.raises(ProtocolError) as raised:
        outcome_of(record_of(fields))
    assert raised.value.to_wire() == error.to_wire()


def test_another_exception_fails_the_record_without_its_text() -> None:
    fields = columns(RuntimeError("password=hunter2"))
    assert fields["status"] == ToolTask.Status.FAILED
    assert fields["error"] == InternalError().to_wire() and "hunter2" not in str(fields)
    with pytest.raises(ProtocolError) as raised:
        outcome_of(record_of(fields))
    assert raised.value.code == INTERNAL_ERROR


def test_invalid_arguments_are_a_failed_result_in_a_2025_task() -> None:
    fields = columns(InvalidToolArguments("'n' is required"), handshake=True, tool_name="slow")
    assert fields["status"] == ToolTask.Status.FAILED
    assert fields["result"]["isError"] is True
    assert "Invalid arguments for tool slow: 'n' is required" in fields["result"]["content"][0]["text"]


def test_asking_for_input_parks_the_record_and_is_rebuilt_from_its_columns() -> None:
    fields = columns(ASKING)
    assert fields["status"] == ToolTask.Status.INPUT_REQUIRED and "finished_at" not in fields
    assert (fields["input_requests"], fields["request_state"]) == (ASKING["inputRequests"], "s")
    assert "result" not in fields
    assert outcome_of(record_of(fields)) == ASKING
    kept = columns({**ASKING, "extra": 1}, keep_answer=True)  # a worker call's awaiting process returns it whole
    assert outcome_of(record_of(kept)) == {**ASKING, "extra": 1}


def test_a_2025_task_cannot_ask_for_input_without_a_session() -> None:
    fields = columns(ASKING, handshake=True, tool_name="slow")
    assert fields["status"] == ToolTask.Status.FAILED and fields["result"]["isError"] is True
    assert "Tool slow needs input from the client" in fields["status_message"]


def test_a_cancelled_record_raises_its_message() -> None:
    with pytest.raises(InternalError, match="Cancelled by the client"):
        outcome_of(record_of({"status": ToolTask.Status.CANCELLED, "status_message": "Cancelled by the client"}))


@pytest.mark.parametrize(
    ("status", "holds"),
    [("working", False), ("input_required", True), ("completed", True), ("failed", True), ("cancelled", True)],
)
def test_settled_means_terminal_or_parked(status: str, holds: bool) -> None:
    assert settled(record_of({"status": status})) is holds


def test_strip_internal_removes_the_park_marker_only() -> None:
    assert strip_internal({**RESULT, PARK: True}) == RESULT
