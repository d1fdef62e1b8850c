"""A call's progress is kept on its durable record for the admin (``RecordedProgress``), whether or not the client
asked for progress notifications; the wire notification still goes only to a client that sent a token."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_app.models import ToolTask
from mcp_app.runtime import progress as progress_module
from mcp_app.runtime.progress import RecordedProgress
from tests.helpers import (
    close_connections_of_async_threads,  # noqa: F401  (same clean-up here)
    running_worker_call,
)

pytestmark = pytest.mark.django_db(transaction=True)


def task(access: Any, **fields: Any) -> ToolTask:
    return running_worker_call(access, "countdown", ttl_ms=60_000, **fields)


@pytest.fixture
def access(access_factory: Any) -> Any:
    return access_factory(tools=())


async def test_progress_is_recorded_without_a_client_token(access: Any) -> None:
    from asgiref.sync import sync_to_async

    record = await sync_to_async(task)(access)
    sent: list[dict[str, Any]] = []

    async def emit(message: dict[str, Any]) -> None:
        sent.append(message)

    reporter = RecordedProgress(None, emit, record.pk)
    await reporter.report(3, 10, "7 to go")
    row = await ToolTask.objects.aget(pk=record.pk)
    assert (row.progress, row.progress_total, row.progress_message, row.progress_percent) == (3, 10, "7 to go", 30)
    assert sent == []  # no token: nothing on the wire


async def test_writes_are_throttled_but_the_final_report_lands(access: Any, monkeypatch: Any) -> None:
    from asgiref.sync import sync_to_async

    monkeypatch.setattr(progress_module, "RECORD_INTERVAL_SECONDS", 3600.0)
    record = await sync_to_async(task)(access)
    sent: list[dict[str, Any]] = []

    async def emit(message: dict[str, Any]) -> None:
        sent.append(message)

    reporter = RecordedProgress("tok", emit, record.pk)
    await reporter.report(1, 4, "first")
    await reporter.report(2, 4, "second")  # within the interval: not written
    row = await ToolTask.objects.aget(pk=record.pk)
    assert (row.progress, row.progress_message) == (1, "first")
    await reporter.report(4, 4, "done")  # reaches the total: written at once
    row = await ToolTask.objects.aget(pk=record.pk)
    assert (row.progress, row.progress_message, row.progress_percent) == (4, "done", 100)
    assert [m["params"]["progress"] for m in sent] == [1, 2, 4]  # the client hears every report


async def test_a_finished_task_keeps_its_last_progress(access: Any) -> None:
    from asgiref.sync import sync_to_async

    record = await sync_to_async(task)(access, status="completed", progress=5, progress_total=5)

    async def emit(message: dict[str, Any]) -> None:
        return None

    await RecordedProgress(None, emit, record.pk).report(1, 5, "late")
    row = await ToolTask.objects.aget(pk=record.pk)
    assert (row.progress, row.progress_message) == (5, "")
