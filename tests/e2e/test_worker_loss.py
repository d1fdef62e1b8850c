"""SIGKILL of the worker process running a call, mid-call: re-run or failed per ``WORKER_LOST_CALLS``, never
left ``working``.

Each test starts its own daphne and its own Celery worker (one pool process, prefork) on a queue of their own
(``MCP_WORKER_QUEUE``), so no other worker takes the call. The pool process running the tool is found by the pid
the tool writes to its trace, and killed with SIGKILL while the tool is between steps; the worker's main process
notices the loss (Celery's ``WorkerLostError``) and, per the setting, puts the message back on the queue (a new
pool process runs the call again from the start) or fails the record at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from mcp_app.models import ToolTask
from tests.conftest import Access
from tests.e2e.conftest import running_daphne
from tests.e2e.workers import (
    WAIT,
    job,
    lines,
    modern_tool_call,
    orm,
    quiesce,
    require_broker,
    running_worker,
    wait_for_line,
)
from tests.helpers import endpoint
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e


@pytest.fixture
def loss_access(transactional_db: None, access_factory: Any) -> Iterator[Access]:
    yield access_factory(tools=("worker_job",))
    quiesce()


async def _call_and_kill(url: str, access: Access, trace: Path) -> tuple[dict[str, Any], list[int]]:
    """Start a 2026 call of 30 steps, SIGKILL the pool process running it after its third step, and return
    the final response with the pids that ran it (in order)."""
    body, extra = modern_tool_call("worker_job", job(trace, "K", 30, 40), meta={"progressToken": 1})
    async with httpx.AsyncClient(timeout=WAIT * 2) as http:

        async def call() -> dict[str, Any]:
            reply = await http.post(url, headers={**headers(access), **extra, "Accept": "application/json"}, json=body)
            return orjson.loads(reply.content)

        pending = asyncio.ensure_future(call())
        found = await wait_for_line(trace, lambda line: line == "K step 3", "the third step")
        first_pid = int(next(line for line in found if line.startswith("K start")).split()[2])
        os.kill(first_pid, signal.SIGKILL)  # the worker's pool process that runs the tool
        response = await asyncio.wait_for(pending, WAIT * 2)
    pids = [int(line.split()[2]) for line in lines(trace) if line.startswith("K start")]
    assert pids[0] == first_pid
    return response, pids


@pytest.mark.parametrize("policy", ["requeue", "fail"])
async def test_a_worker_killed_mid_call_reruns_or_fails_the_call_never_leaves_it_working(
    policy: str, loss_access: Access, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    require_broker()
    access = loss_access
    queue = f"loss-{policy}-{uuid.uuid4().hex[:8]}"
    env = {"MCP_WORKER_LOST_CALLS": policy, "MCP_WORKER_CALL_MAX_ATTEMPTS": "2", "MCP_WORKER_QUEUE": queue}
    with (
        running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env) as worker,
        running_daphne(tmp_path_factory, extra_env=env) as server,
    ):
        trace = tmp_path / "trace"
        response, pids = await _call_and_kill(endpoint(server.url, access), access, trace)
        record = await orm(ToolTask.objects.get, server=access.server)
        if policy == "requeue":
            assert "result" in response, (response, worker.log())
            result = response["result"]["structuredContent"]
            assert result["done"] == 30
            assert len(pids) == 2 and pids[1] != pids[0] and result["pid"] == pids[1]
            assert lines(trace)[-1] == "K finished"
            assert (record.status, record.attempts) == ("completed", 2)
        else:
            assert response["error"]["code"] == -32603, response
            assert "worker running this call stopped" in response["error"]["message"]
            assert pids == [pids[0]]  # never run again
            assert "K finished" not in lines(trace)
            assert (record.status, record.attempts) == ("failed", 1)
        assert record.finished_at is not None


async def test_the_reaper_fails_a_call_no_worker_took_before_its_deadline(
    loss_access: Access, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No worker consumes this queue: the call stays queued until the beat reaper fails it at its deadline; the
    client waiting for it gets the failure. The call has an idempotency key, so its record is written before
    dispatch (a call only its request awaits has none until a worker takes it: the awaiting process fails it at
    ``WORKER_QUEUE_TIMEOUT_SECONDS``, ``test_worker_liveness.py``)."""
    from mcp_app.workers.running.reaper import fail_overdue

    require_broker()
    access = loss_access
    env = {"MCP_WORKER_QUEUE": f"nobody-{uuid.uuid4().hex[:8]}"}
    with running_daphne(tmp_path_factory, extra_env=env) as server:
        url = endpoint(server.url, access)
        async with httpx.AsyncClient(timeout=WAIT) as http:
            key = {"io.mcp-host/idempotencyKey": uuid.uuid4().hex}
            body, extra = modern_tool_call("worker_job", {"steps": 1}, meta=key)
            pending = asyncio.ensure_future(
                http.post(url, headers={**headers(access), **extra, "Accept": "application/json"}, json=body)
            )
            deadline = time.monotonic() + WAIT
            record = None
            while time.monotonic() < deadline:
                record = await orm(ToolTask.objects.filter(server=access.server).first)
                if record is not None:
                    break
                await asyncio.sleep(0.02)
            assert record is not None and record.status == "queued"
            # The reaper as it runs once the deadline (worker_job's timeout, 120 s) has passed.
            assert await orm(fail_overdue, record.deadline + (record.deadline - record.created_at)) == 1
            reply = await asyncio.wait_for(pending, WAIT)
    assert reply.json()["error"]["code"] == -32001
    record = await orm(ToolTask.objects.get, pk=record.pk)
    assert record.status == "failed" and record.error["code"] == -32001


@pytest.mark.parametrize("keyed", [False, True], ids=["unwritten", "with a key"])
async def test_a_worker_call_outlives_a_sigkilled_daphne(
    keyed: bool, loss_access: Access, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The daphne that accepted a worker call is SIGKILLed while the worker runs it: the worker finishes the call
    and records its outcome (for a call sent unwritten, in the row the worker wrote when it took it). A call with
    an idempotency key re-issued to another daphne gets that outcome; the tool ran once."""
    require_broker()
    access = loss_access
    queue = f"outlive-{uuid.uuid4().hex[:8]}"
    env = {"MCP_WORKER_QUEUE": queue}
    trace = tmp_path / "trace"
    meta = {"io.mcp-host/idempotencyKey": uuid.uuid4().hex} if keyed else {}
    body, extra = modern_tool_call("worker_job", job(trace, "D", 8, 100), meta=meta)
    with running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env):
        with running_daphne(tmp_path_factory, extra_env=env) as first:
            async with httpx.AsyncClient(timeout=WAIT) as http:
                pending = asyncio.ensure_future(
                    http.post(endpoint(first.url, access), headers={**headers(access), **extra}, json=body)
                )
                await wait_for_line(trace, lambda line: line == "D step 1", "the first step")
                first.process.send_signal(signal.SIGKILL)
                with pytest.raises(httpx.HTTPError):
                    await asyncio.wait_for(pending, WAIT)
        deadline = time.monotonic() + WAIT
        while (record := await orm(ToolTask.objects.filter(server=access.server).first)) is None or (
            record.status != "completed"
        ):
            assert time.monotonic() < deadline, f"the call's outcome was never recorded: {record}"
            await asyncio.sleep(0.05)
        assert record.result["structuredContent"]["done"] == 8 and record.attempts == 1
        if keyed:
            with running_daphne(tmp_path_factory, extra_env=env) as second:
                async with httpx.AsyncClient(timeout=WAIT) as http:
                    reply = await http.post(
                        endpoint(second.url, access),
                        headers={**headers(access), **extra, "Accept": "application/json"},
                        json=body,
                    )
            assert reply.json()["result"]["structuredContent"]["done"] == 8, reply.text
    assert len([line for line in lines(trace) if line.startswith("D start")]) == 1  # the tool ran once
    assert await orm(ToolTask.objects.filter(server=access.server).count) == 1
