"""The worker path never waits silently, against real daphne processes, real Celery workers, Redis and the
database (``mcp_app.heartbeat``, ``mcp_app.workers.serving.liveness``):

- ``/readyz`` reports whether a worker consumes the queue of worker calls (their heartbeats), and when it
  stops consuming;
- a worker call no worker takes fails within ``WORKER_QUEUE_TIMEOUT_SECONDS`` with a clear error (``queued``
  until then);
- a whole worker killed with SIGKILL (main and pool processes: nothing notices the loss but the heartbeat) has
  its call re-run on another worker, or failed, per ``WORKER_LOST_CALLS``, within 15 s;
- a worker logs one INFO line per call: tool, server, tenant, agent, outcome, duration, never the arguments.

Each test has daphne and workers of its own on a queue of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    Worker,
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

# The bound: a call whose whole worker was killed completes or fails within this many seconds.
LOSS_BOUND_SECONDS = 15.0


@pytest.fixture
def live_access(transactional_db: None, access_factory: Any) -> Iterator[Access]:
    yield access_factory(tools=("worker_job",))
    quiesce()


def _queue(kind: str) -> str:
    return f"live-{kind}-{uuid.uuid4().hex[:8]}"


async def _readyz_workers(url: str) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        reply = await http.get(f"{url}/readyz")
    return reply.status_code, reply.json()["checks"]["workers"]


async def _until_workers(url: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        code, check = await _readyz_workers(url)
        if check["status"] == status:
            assert code == 200, check
            return check
        if time.monotonic() > deadline:
            pytest.fail(f"/readyz never reported workers {status}: {check}")
        await asyncio.sleep(0.1)


async def test_readyz_reports_whether_a_worker_consumes_the_queue(
    live_access: Access, tmp_path_factory: pytest.TempPathFactory
) -> None:
    require_broker()
    queue = _queue("ready")
    env = {"MCP_WORKER_QUEUE": queue}
    with running_daphne(tmp_path_factory, extra_env=env) as server:
        code, check = await _readyz_workers(server.url)
        assert code == 200  # inline tools are still served
        assert check["status"] == "none" and check["consumers"] == 0 and check["queue"] == queue, check
        with running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env):
            check = await _until_workers(server.url, "ok")
            assert check["consumers"] == 1, check
        # A warm shutdown stops counting at once (not a heartbeat timeout later).
        code, check = await _readyz_workers(server.url)
        assert check["status"] == "none", check
        assert "readiness: workers is none" in server.stderr()


def _queued(queue: str) -> int:
    """How many messages wait on the broker's list of ``queue`` (kombu's Redis transport: a list of that name)."""
    import redis

    client = redis.Redis.from_url(require_broker())
    try:
        return int(client.llen(queue))
    finally:
        client.close()


async def _until_queued(queue: str, pending: asyncio.Future[Any]) -> None:
    deadline = time.monotonic() + WAIT
    while not _queued(queue):
        assert not pending.done(), "the call ended before its message was queued"
        assert time.monotonic() < deadline, "the call's message never reached the queue"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("keyed", [False, True], ids=["unwritten", "with a key"])
async def test_a_worker_call_no_worker_takes_fails_within_the_setting(
    keyed: bool, live_access: Access, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No worker consumes the queue: the call fails after ``WORKER_QUEUE_TIMEOUT_SECONDS`` (2 s here) with an
    error that says so, long before its deadline (120 s). A call with an idempotency key (others may await it)
    is ``queued`` in its record meanwhile; one only its request awaits has no record until then (the message is
    its only copy), and the awaiting process leaves a ``failed`` tombstone, so a late delivery does not run it."""
    require_broker()
    access = live_access
    timeout = 2.0
    queue = _queue("nobody")
    env = {"MCP_WORKER_QUEUE": queue, "MCP_WORKER_QUEUE_TIMEOUT_SECONDS": str(timeout)}
    with running_daphne(tmp_path_factory, extra_env=env) as server:
        meta = {"io.mcp-host/idempotencyKey": uuid.uuid4().hex} if keyed else None
        body, extra = modern_tool_call("worker_job", {"steps": 1}, meta=meta)
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=WAIT) as http:
            pending = asyncio.ensure_future(
                http.post(endpoint(server.url, access), headers={**headers(access), **extra}, json=body)
            )
            await _until_queued(queue, pending)
            record = await orm(ToolTask.objects.filter(server=access.server).first)
            if keyed:
                assert record is not None and record.status == "queued"
            else:
                assert record is None  # nothing written before a worker takes it
            reply = await asyncio.wait_for(pending, WAIT)
        elapsed = time.monotonic() - started
    error = reply.json()["error"]
    assert error["code"] == -32603, error
    assert "No worker took this call within 2 s" in error["message"]
    assert timeout <= elapsed < timeout + 8.0, elapsed  # the awaiting poll re-reads at most every 5 s
    record = await orm(ToolTask.objects.get, server=access.server)
    assert record.status == "failed" and record.attempts == 0 and "No worker" in record.status_message


async def test_a_call_cancelled_before_a_worker_took_it_never_runs(
    live_access: Access, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """A 2026 client closes its stream while the call's message waits in the queue (no record yet): a
    ``cancelled`` tombstone is left, and the worker that takes the message later skips it: the tool never
    starts, the record stays cancelled and untaken. The next call on the same one-process worker (after it in
    the queue) runs, so the skipped message was taken first."""
    require_broker()
    access = live_access
    queue = _queue("cancelled")
    env = {"MCP_WORKER_QUEUE": queue}
    trace = tmp_path / "trace"
    with running_daphne(tmp_path_factory, extra_env=env) as server:
        url = endpoint(server.url, access)
        body, extra = modern_tool_call("worker_job", job(trace, "C", 1))
        async with httpx.AsyncClient(timeout=WAIT) as http:
            pending = asyncio.ensure_future(http.post(url, headers={**headers(access), **extra}, json=body))
            await _until_queued(queue, pending)
            pending.cancel()  # the connection closes: the call is cancelled
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        deadline = time.monotonic() + WAIT
        while (record := await orm(ToolTask.objects.filter(server=access.server).first)) is None:
            assert time.monotonic() < deadline, "no tombstone was written for the cancelled call"
            await asyncio.sleep(0.02)
        assert record.status == "cancelled" and record.attempts == 0
        with running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env, purge=False):
            body, extra = modern_tool_call("worker_job", job(trace, "N", 1), id=2)
            async with httpx.AsyncClient(timeout=WAIT) as http:
                reply = await http.post(
                    url, headers={**headers(access), **extra, "Accept": "application/json"}, json=body
                )
            assert reply.json()["result"]["structuredContent"]["done"] == 1, reply.text
    assert not [line for line in lines(trace) if line.startswith("C ")]
    record = await orm(ToolTask.objects.get, pk=record.pk)
    assert (record.status, record.attempts, record.owner) == ("cancelled", 0, "")


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def _owner_of(pid: int, workers: list[Worker]) -> Worker:
    """The worker whose process (or pool process) ``pid`` is."""
    parent = _ppid(pid)
    for worker in workers:
        if worker.process.pid in (pid, parent):
            return worker
    pytest.fail(f"pid {pid} (parent {parent}) belongs to none of the workers")


def _kill_whole(worker: Worker) -> None:
    """SIGKILL the worker's main process and its pool processes at once: nothing is left to notice the loss."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.process.pid, signal.SIGKILL)


@pytest.mark.parametrize("policy", ["requeue", "fail"])
async def test_a_whole_worker_killed_mid_call_has_its_call_rerun_or_failed_within_15_s(
    policy: str, live_access: Access, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    require_broker()
    access = live_access
    queue = _queue(policy)
    env = {"MCP_WORKER_LOST_CALLS": policy, "MCP_WORKER_CALL_MAX_ATTEMPTS": "2", "MCP_WORKER_QUEUE": queue}
    trace = tmp_path / "trace"
    with (
        running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env) as first,
        running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env, purge=False) as second,
        running_daphne(tmp_path_factory, extra_env=env) as server,
    ):
        body, extra = modern_tool_call("worker_job", job(trace, "W", 40, 50), meta={"progressToken": 1})
        async with httpx.AsyncClient(timeout=WAIT * 2) as http:

            async def call() -> dict[str, Any]:
                reply = await http.post(
                    endpoint(server.url, access),
                    headers={**headers(access), **extra, "Accept": "application/json"},
                    json=body,
                )
                return orjson.loads(reply.content)

            pending = asyncio.ensure_future(call())
            found = await wait_for_line(trace, lambda line: line == "W step 3", "the third step")
            ran_on = int(next(line for line in found if line.startswith("W start")).split()[2])
            victim = _owner_of(ran_on, [first, second])
            _kill_whole(victim)
            killed_at = time.monotonic()
            response = await asyncio.wait_for(pending, LOSS_BOUND_SECONDS + 5)
            settled_after = time.monotonic() - killed_at
        survivor = second if victim is first else first
        record = await orm(ToolTask.objects.get, server=access.server)
        assert settled_after <= LOSS_BOUND_SECONDS, (settled_after, response)
        pids = [int(line.split()[2]) for line in lines(trace) if line.startswith("W start")]
        if policy == "requeue":
            assert "result" in response, (response, survivor.log())
            result = response["result"]["structuredContent"]
            assert result["done"] == 40 and result["pid"] == pids[-1] != ran_on
            assert _owner_of(pids[-1], [survivor]) is survivor
            assert (record.status, record.attempts) == ("completed", 2)
        else:
            assert response["error"]["code"] == -32603, response
            assert "worker running this call stopped" in response["error"]["message"]
            assert pids == [ran_on]
            assert (record.status, record.attempts) == ("failed", 1)


async def test_a_worker_logs_one_line_per_call(
    live_access: Access, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    require_broker()
    access = live_access
    queue = _queue("log")
    env = {"MCP_WORKER_QUEUE": queue}
    secret = f"argument-{uuid.uuid4().hex}"
    with (
        running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env) as worker,
        running_daphne(tmp_path_factory, extra_env=env) as server,
    ):
        body, extra = modern_tool_call("worker_job", job(tmp_path / "trace", secret, 2))
        async with httpx.AsyncClient(timeout=WAIT) as http:
            reply = await http.post(endpoint(server.url, access), headers={**headers(access), **extra}, json=body)
        assert "result" in reply.json(), reply.text
        deadline = time.monotonic() + WAIT
        while True:  # the line is written once the outcome is announced, just after the answer
            if "worker call " in worker.log() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        log = worker.log()
    calls = [line for line in log.splitlines() if "worker call " in line]
    assert len(calls) == 1, log
    line = calls[0]
    assert "INFO" in line and "tool=worker_job" in line and "outcome=completed" in line, line
    assert f"server={access.server.server_id}" in line and f"tenant={access.tenant.slug}" in line, line
    assert f"agent={access.agent.agent_id}" in line and "duration_ms=" in line, line
    assert secret not in log and access.raw_token not in log
