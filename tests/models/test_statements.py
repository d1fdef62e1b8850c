"""``mcp_app.models.statements``: the composed-once INSERT and UPDATE write what the ORM would write, and read
back through the ORM the same, on the database the suite runs on (PostgreSQL in CI's first run, SQLite in the
embedded one)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from mcp_app.models import ToolTask, statements

pytestmark = pytest.mark.django_db

STARTED = datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)
ARGUMENTS = {"query": "naïve ☃ \"quoted\" 'single'", "nested": {"list": [1, 2.5, None, True]}, "empty": {}}


@pytest.fixture
def pair(server_factory: Any, agent_factory: Any) -> tuple[Any, Any]:
    server = server_factory()
    return server, agent_factory(tenant=server.tenant)


def new(pair: tuple[Any, Any], task_id: str = "t-1", **fields: Any) -> ToolTask:
    server, agent = pair
    return ToolTask.objects.insert(
        task_id=task_id,
        server_id=server.pk,
        agent_id=agent.pk,
        tool_name="job",
        arguments=ARGUMENTS,
        ttl_ms=60_000,
        expires_at=STARTED + timedelta(minutes=1),
        **fields,
    )


def test_an_inserted_row_reads_back_through_the_orm_as_written(pair: Any) -> None:
    with CaptureQueriesContext(connection) as queries:
        task = new(pair, status="queued", started_at=STARTED, request_state="s", client_capabilities={"x": {}})
    assert [query["sql"].split(" ", 1)[0] for query in queries.captured_queries] == ["INSERT"]
    assert isinstance(task.pk, int) and not task._state.adding
    loaded = ToolTask.objects.get(pk=task.pk)
    assert (loaded.task_id, loaded.tool_name, loaded.status, loaded.request_state) == ("t-1", "job", "queued", "s")
    assert loaded.arguments == ARGUMENTS and loaded.client_capabilities == {"x": {}}
    assert loaded.started_at == STARTED and loaded.expires_at == STARTED + timedelta(minutes=1)
    # The model's defaults, as its constructor applied them.
    assert (loaded.attempts, loaded.owner, loaded.input_responses, loaded.execution) == (0, "", {}, "inline")
    # None in a JSON field is SQL NULL, as with the ORM: the lookup that finds NULLs finds it.
    assert loaded.result is None and ToolTask.objects.filter(pk=task.pk, result__isnull=True).exists()


def test_a_duplicate_insert_raises_django_s_integrity_error_and_leaves_the_transaction_usable(pair: Any) -> None:
    new(pair)
    with pytest.raises(IntegrityError), transaction.atomic():
        new(pair)  # task_id is unique
    assert ToolTask.objects.filter(task_id="t-1").count() == 1


def test_an_update_moves_only_the_row_whose_conditions_all_hold(pair: Any) -> None:
    task = new(pair, status="queued", celery_id="c-1")

    def take(celery_id: str) -> int:
        return statements.update(
            ToolTask,
            task.pk,
            {"status": "working", "started_at": STARTED, "result": {"ok": ["☃"]}},
            equal={"celery_id": celery_id, "status": "queued"},
            increment=("attempts",),
        )

    assert take("c-2") == 0  # another dispatch's id
    assert take("c-1") == 1
    assert take("c-1") == 0  # no longer queued
    loaded = ToolTask.objects.get(pk=task.pk)
    assert (loaded.status, loaded.attempts, loaded.started_at, loaded.result) == ("working", 1, STARTED, {"ok": ["☃"]})


def test_transition_never_moves_a_terminal_row_and_sets_updated_at(pair: Any) -> None:
    task = new(pair, status="working", updated_at=STARTED)
    assert ToolTask.objects.transition(task.pk, status="completed", result={"content": []}) is True
    loaded = ToolTask.objects.get(pk=task.pk)
    assert loaded.status == "completed" and loaded.updated_at > STARTED
    assert ToolTask.objects.transition(task.pk, status="working") is False
    assert ToolTask.objects.transition(task.pk + 1000, status="working") is False  # no such row
    assert ToolTask.objects.get(pk=task.pk).status == "completed"


def test_transition_writes_sql_null_for_none(pair: Any) -> None:
    task = new(pair, status="working", result={"content": []})
    assert ToolTask.objects.transition(task.pk, result=None, error={"code": -32603, "message": "m"}) is True
    assert ToolTask.objects.filter(pk=task.pk, result__isnull=True, error__code=-32603).exists()


def test_insert_many_writes_what_the_orm_writes(pair: Any) -> None:
    # COPY on PostgreSQL (text fields escaped by psycopg), executemany elsewhere: every column reads back through
    # the ORM as the same row saved by the ORM does, awkward values included.
    from zoneinfo import ZoneInfo

    from mcp_app.models import ToolCall

    server, agent = pair
    awkward = "tab\there, new\nline, back\\slash, \\N, naïve ☃, \"quoted\" 'single'"
    rows = [
        {
            "tenant_id": server.tenant_id,
            "server_id": server.pk if index else None,
            "agent_id": agent.pk if index else None,
            "server_key": server.server_id,
            "agent_key": awkward,
            "token_prefix": "mcp_0123abcd",
            "tool_name": f"tool-{index}",
            "arguments_digest": "ab" * 32,
            "arguments": ARGUMENTS if index else {},
            "status": "error" if index else "ok",
            "error_code": -32602 if index else None,
            "error_message": awkward if index else "",
            # a UTC time, and one of another zone (the same instant is stored)
            "started_at": STARTED if index else STARTED.astimezone(ZoneInfo("America/New_York")),
            "finished_at": STARTED + timedelta(microseconds=1500),
            "duration_ms": 1.5,
            "era": "legacy",
            "protocol_version": "2025-06-18",
            "request_id": str(index),
            "task_id": "",
            "upstream": "",
            "upstream_ms": 12.25 if index else None,
        }
        for index in range(2)
    ]
    by_orm = [ToolCall(**{**row, "request_id": f"orm-{row['request_id']}"}) for row in rows]
    ToolCall.objects.bulk_create(by_orm)
    ToolCall.objects.insert_rows(rows)
    fields = [field.attname for field in ToolCall._meta.concrete_fields if not field.primary_key]
    for row in rows:
        written = ToolCall.objects.values(*fields).get(request_id=row["request_id"])
        saved = ToolCall.objects.values(*fields).get(request_id=f"orm-{row['request_id']}")
        assert {**saved, "request_id": row["request_id"]} == written
        assert written["started_at"] == row["started_at"] and written["agent_key"] == awkward
