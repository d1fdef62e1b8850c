"""The wire forms of the 2025-11-25 experimental tasks (``mcp_app.protocol.handshake_tasks``), without a database:
which revision has them, the capability, a tool's ``execution``, the ``params.task`` of a task-augmented call, the
``Task`` object, the status notification, the related-task ``_meta`` and the ``tasks/list`` cursor. Expected
values are the spec's (``spec/2025-11-25/basic/utilities/tasks.mdx``); errors by code against
``mcp_app.protocol.errors``. The same forms at the wire: ``tests/interaction/tasks/test_handshake_tasks.py``."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from mcp_app.protocol import handshake_tasks as ht
from mcp_app.protocol import versions
from mcp_app.protocol.errors import INVALID_PARAMS, ProtocolError

STATE = ht.TaskState(
    task_id="t-1",
    status="working",
    created_at="2026-12-02T04:00:00Z",
    last_updated_at="2026-12-02T04:00:01Z",
    ttl_ms=60_000,
    poll_interval_ms=1_000,
)


@pytest.mark.parametrize("version", [*versions.HANDSHAKE_VERSIONS, *versions.MODERN_VERSIONS])
def test_only_2025_11_25_has_these_tasks(version: str) -> None:
    assert ht.has_tasks(version) is (version == versions.V2025_11_25)


def test_the_capability_lists_cancel_list_and_task_augmented_tool_calls() -> None:
    assert ht.server_capability() == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert ht.server_capability() is not ht.server_capability(), "a fresh object each time: callers may edit it"


@pytest.mark.parametrize(
    ("support", "execution"),
    [("optional", {"taskSupport": "optional"}), ("required", {"taskSupport": "required"}), ("forbidden", None)],
)
def test_a_tool_shows_its_task_support_unless_forbidden(support: str, execution: Any) -> None:
    assert ht.tool_execution(support) == execution


@pytest.mark.parametrize(
    ("params", "asked"),
    [
        ({}, (False, None)),
        ({"task": None}, (False, None)),
        ({"task": {}}, (True, None)),
        ({"task": {"ttl": 0}}, (True, 0)),
        ({"task": {"ttl": 60000}}, (True, 60000)),
        ({"task": {"ttl": 60000.0}}, (True, 60000)),
    ],
)
def test_the_task_a_call_asks_for(params: dict[str, Any], asked: tuple[bool, int | None]) -> None:
    assert ht.requested_ttl(params) == asked


@pytest.mark.parametrize("task", [5, "task", [], {"ttl": -1}, {"ttl": 1.5}, {"ttl": True}, {"ttl": "60"}])
def test_a_malformed_task_is_invalid_params(task: Any) -> None:
    with pytest.raises(ProtocolError) as excinfo:
        ht.requested_ttl({"task": task})
    assert excinfo.value.code == INVALID_PARAMS


def test_the_task_object_has_the_specs_fields_and_a_status_message_only_when_there_is_one() -> None:
    assert ht.task(STATE) == {
        "taskId": "t-1",
        "status": "working",
        "createdAt": "2026-12-02T04:00:00Z",
        "lastUpdatedAt": "2026-12-02T04:00:01Z",
        "ttl": 60_000,
        "pollInterval": 1_000,
    }
    failed = ht.TaskState("t-2", "failed", "a", "b", None, status_message="Tool execution failed: no")
    assert ht.task(failed) == {
        "taskId": "t-2",
        "status": "failed",
        "statusMessage": "Tool execution failed: no",
        "createdAt": "a",
        "lastUpdatedAt": "b",
        "ttl": None,  # unlimited: the spec's null, not an absent field
    }


def test_a_created_task_and_its_status_notification_wrap_the_same_task() -> None:
    assert ht.create_task_result(STATE) == {"task": ht.task(STATE)}
    note = ht.status_notification(STATE)
    assert note == {"jsonrpc": "2.0", "method": ht.STATUS_NOTIFICATION, "params": ht.task(STATE)}
    assert ht.STATUS_NOTIFICATION == "notifications/tasks/status"
    assert "_meta" not in note["params"], "the spec: no related-task _meta on the status notification"


def test_terminal_statuses_and_the_revisions_methods() -> None:
    assert frozenset({"completed", "failed", "cancelled"}) == ht.TERMINAL_STATUSES
    assert set(ht.METHODS) == {"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"}


def test_the_related_task_meta_is_added_to_what_is_there() -> None:
    assert ht.RELATED_TASK == "io.modelcontextprotocol/related-task"
    result = {"content": [], "_meta": {"other": 1}}
    related = ht.with_related_task(result, "t-1")
    assert related == {"content": [], "_meta": {"other": 1, ht.RELATED_TASK: {"taskId": "t-1"}}}
    assert result == {"content": [], "_meta": {"other": 1}}, "the original is left alone"
    assert ht.with_related_task({"_meta": "junk"}, "t-1")["_meta"] == {ht.RELATED_TASK: {"taskId": "t-1"}}


@pytest.mark.parametrize("position", [0, 1, 25, 10**9])
def test_a_cursor_names_its_position(position: int) -> None:
    cursor = ht.encode_cursor(position)
    assert "=" not in cursor and cursor.isascii()
    assert ht.decode_cursor(cursor) == position


def test_no_cursor_is_the_first_page() -> None:
    assert ht.decode_cursor(None) is None


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not-a-cursor!",
        5,
        base64.urlsafe_b64encode(b"other:5").decode(),
        base64.urlsafe_b64encode(b"mcp-tasks:x").decode(),
    ],
    ids=["empty", "not base64", "not a string", "foreign prefix", "not a number"],
)
def test_anything_else_is_invalid_params(cursor: Any) -> None:
    with pytest.raises(ProtocolError) as excinfo:
        ht.decode_cursor(cursor)
    assert excinfo.value.code == INVALID_PARAMS
