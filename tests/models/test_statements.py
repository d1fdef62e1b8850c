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
