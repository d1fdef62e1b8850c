"""Worker calls on the embedded default (no broker: ``WORKER_DISPATCH`` in-process), at the wire: the same
durable record, events and outcomes as on a Celery worker (tests/e2e/test_workers.py runs a real one)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mcp_app.definitions.registry import registry
from mcp_app.models import ServerTool, ToolTask
from tests.helpers import call, result_of, rpc

IDEMPOTENCY = "io.mcp-host/idempotencyKey"


pytestmark = pytest.mark.usefixtures("worker_calls_drained")


@pytest.fixture(autouse=True)
def _in_process(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_DISPATCH": "in_process"}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_worker_call_streams_progress_and_leaves_a_completed_record(make_access, orm, tmp_path):
    access = await make_access(tools=("worker_job",))
    trace = tmp_path / "trace"
    params = {
        "name": "worker_job",
        "arguments": {"path": str(trace), "tag": "a", "steps": 3},
        "_meta": {"progressToken": "p1"},
    }
    reply = await call(access, rpc("tools/call", params, id=7))
    assert reply.status == 200
    assert reply.content_type.startswith("text/event-stream")
    messages = reply.sse_messages()
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"], p["total"]) for p in progress] == [
        ("p1", 1, 3),
        ("p1", 2, 3),
        ("p1", 3, 3),
    ]
    final = messages[-1]
    assert final["id"] == 7
    assert final["result"]["structuredContent"]["done"] == 3
    record = await orm(ToolTask.objects.get, server=access.server)
    assert (record.execution, record.status, record.client_task, record.attempts) == ("worker", "completed", False, 1)
    assert record.request_id == "7" and record.started_at and record.finished_at and record.deadline
    assert record.result["structuredContent"]["done"] == 3
    assert lines(trace)[-1] == "a finished"


async def test_invalid_arguments_are_refused_before_anything_is_recorded(make_access, orm):
    access = await make_access(tools=("worker_job",))
    reply = await call(access, rpc("tools/call", {"name": "worker_job", "arguments": {"steps": "many"}}))
    body = reply.json()
    # The default unannounced revision reports bad arguments as an error result or -32602, never a run.
    assert "error" in body or body["result"].get("isError") is True
    assert await orm(ToolTask.objects.count) == 0


async def test_the_same_idempotency_key_runs_the_tool_once(make_access, orm, tmp_path):
    access = await make_access(tools=("worker_job",))
    trace = tmp_path / "trace"
    arguments = {"path": str(trace), "tag": "k", "steps": 2}
    meta = {IDEMPOTENCY: "order-42"}
    first = result_of(await _keyed(access, arguments, meta, 1))
    second = result_of(await _keyed(access, arguments, meta, 2))
    assert first["structuredContent"] == second["structuredContent"]
    assert len([line for line in lines(trace) if line.startswith("k start")]) == 1
    assert await orm(ToolTask.objects.filter(idempotency_key="order-42").count) == 1


async def _keyed(access: Any, arguments: dict[str, Any], meta: dict[str, Any], request_id: int) -> Any:
    from tests.helpers import modern_body, prepared_headers, send

    body = modern_body("tools/call", {"name": "worker_job", "arguments": arguments}, id=request_id)
    body["params"]["_meta"].update(meta)
    headers, drop = prepared_headers(body, None)
    return await send(access, body, headers=headers, drop=drop)


async def test_concurrent_calls_with_one_key_attach_to_one_run(make_access, orm, tmp_path):
    access = await make_access(tools=("worker_job",))
    trace = tmp_path / "trace"
    arguments = {"path": str(trace), "tag": "c", "steps": 3, "interval_ms": 20}
    replies = await asyncio.gather(*(_keyed(access, arguments, {IDEMPOTENCY: "same"}, n) for n in range(1, 6)))
    results = [result_of(reply)["structuredContent"] for reply in replies]
    assert all(result == results[0] for result in results) and results[0]["done"] == 3
    assert len([line for line in lines(trace) if line.startswith("c start")]) == 1


async def test_a_2026_client_gets_the_worker_calls_progress_and_result(make_access, tmp_path):
    from tests.helpers import modern_body, prepared_headers, send

    access = await make_access(tools=("worker_job",))
    body = modern_body("tools/call", {"name": "worker_job", "arguments": {"steps": 2}}, id=3)
    body["params"]["_meta"]["progressToken"] = 5
    headers, drop = prepared_headers(body, None)
    reply = await send(access, body, headers=headers, drop=drop)
    messages = reply.sse_messages()
    assert [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"] == [1, 2]
    assert messages[-1]["result"]["structuredContent"]["done"] == 2


async def test_the_demo_servers_expose_the_countdown_worker_tool(transactional_db, orm):
    from mcp_app.contrib.demo.setup import ensure_demo

    await orm(ensure_demo, "http://testserver")
    for server_id in ("demo", "demo-modern"):
        binding = await orm(
            ServerTool.objects.select_related("tool").get, server__server_id=server_id, tool__name="countdown"
        )
        assert binding.enabled and binding.tool.python_name == "countdown"
    registered = registry.get("countdown")
    assert registered is not None and registered.execution == "worker"


async def test_countdown_reports_each_step_and_returns_the_steps_done(make_access):
    from tests.helpers import modern_body, prepared_headers, send

    access = await make_access(tools=("countdown",))
    body = modern_body("tools/call", {"name": "countdown", "arguments": {"steps": 3, "interval_ms": 0}}, id=1)
    body["params"]["_meta"]["progressToken"] = "cd"
    headers, drop = prepared_headers(body, None)
    messages = (await send(access, body, headers=headers, drop=drop)).sse_messages()
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [(p["progress"], p["total"], p["message"]) for p in progress] == [
        (1, 3, "2 to go"),
        (2, 3, "1 to go"),
        (3, 3, "0 to go"),
    ]
    assert messages[-1]["result"]["structuredContent"] == {"result": 3}


async def test_a_closed_stream_cancels_the_countdown_before_it_finishes(make_access, orm):
    from tests.helpers import close_stream, modern_body, open_stream, wait_until, worker_work_ended

    access = await make_access(tools=("countdown",))
    body = modern_body("tools/call", {"name": "countdown", "arguments": {"steps": 500, "interval_ms": 10}}, id=1)
    body["params"]["_meta"]["progressToken"] = "cd"
    comm = await open_stream(access, body)
    first = await comm.receive_output(timeout=5)
    assert b"notifications/progress" in first["body"]
    await close_stream(comm)

    async def settled_record() -> Any:
        record = await orm(ToolTask.objects.get, server=access.server)
        return None if record.status in ("queued", "working") else record

    record = await wait_until(settled_record, what="the countdown's record leaving queued/working")
    assert record.status == "cancelled" and record.result is None
    # The in-process work has ended (the tool saw ctx.cancelled or was cancelled): nothing is left running.
    await worker_work_ended()
