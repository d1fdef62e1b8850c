"""The usage ledger agrees with the audit log over mixed calls on a real daphne and a real Celery worker, one of
whose pool processes is SIGKILLed mid-call (docs/budgets.md, "The usage ledger": what a crash loses).

The test starts its own daphne and its own prefork worker (one pool process) on a queue of their own, requeueing
lost calls. Through daphne it makes inline calls (answered, ``isError``, JSON-RPC errors of tools that ran, calls
refused before running), a cancelled inline call, a cancelled worker call, worker calls, and a worker call whose
pool process it kills with SIGKILL mid-run: the call runs again on the pool process that replaces it. Then, for
every tool, the ledger's calls and errors (``UsageDay``) equal the audit log's (``ToolCall``) of the calls that
ran, except what the killed process had buffered: at most the worker calls it ended since its last flush (here,
the calls it ran after its earlier calls were seen in the ledger). The killed run itself is counted by no one;
its re-run once, by the process that ran it.

A pool process that stops cleanly (a warm shutdown) loses nothing: it ends with ``os._exit``, after writing its
usage from Celery's ``worker_process_shutdown`` signal. Without Redis there is no broker: skipped (failed
under ``MCP_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_app.models import ToolCall, UsageDay
from mcp_app.protocol.errors import INVALID_PARAMS
from tests.conftest import Access
from tests.e2e.conftest import running_daphne
from tests.e2e.workers import (
    STOP_TIMEOUT_SECONDS,
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
from tests.helpers import budget_counters, data_messages, endpoint, wait_until
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

INLINE = [  # (tool, arguments), in turn: answered, isError (a refusal, an exception), a JSON-RPC error
    ("echo", {"text": "x"}),
    ("echo", {"text": "y" * 40}),
    ("refuse", {"reason": "no"}),
    ("boom", {}),
    ("failing", {}),
]
INLINE_CALLS = 150
REFUSED = [("nope", {}), ("echo", {"text": 3})] * 2  # an unknown tool, arguments against the schema: never ran
EARLIER = 20  # worker calls the pool process ran and flushed before it was killed
LATER = 5  # worker calls it ran just before the kill: what its buffer may hold when it dies
AFTER = 5  # worker calls of the pool process that replaced it
FAILED = (ToolCall.Status.ERROR, ToolCall.Status.TOOL_ERROR, ToolCall.Status.CANCELLED)


@pytest.fixture
def loss_access(transactional_db: None, access_factory: Any, tool_factory: Any) -> Iterator[Access]:
    access = access_factory(
        tools=("echo", "refuse", "boom", "progress_then_wait", "worker_job", "worker_task_job", "worker_heap")
    )
    tool_factory(access.server, "failing", static_error={"code": -32050, "message": "upstream down"})
    yield access
    quiesce()


def audited() -> dict[str, tuple[int, int]]:
    """Per tool, the audit log's calls that ran (a call refused before its tool ran is an INVALID_PARAMS error)
    and those of them that failed."""
    totals: dict[str, tuple[int, int]] = {}
    for status, code, name in ToolCall.objects.values_list("status", "error_code", "tool_name"):
        if status == ToolCall.Status.ERROR and code == INVALID_PARAMS:
            continue
        calls, errors = totals.get(name, (0, 0))
        totals[name] = (calls + 1, errors + int(status in FAILED))
    return totals


def counted() -> dict[str, tuple[int, int]]:
    return {row.tool_name: (row.calls, row.errors) for row in UsageDay.objects.all()}


async def test_the_ledger_equals_the_audit_log_over_mixed_calls_but_what_a_killed_worker_buffered(
    loss_access: Access, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    require_broker()
    access = loss_access
    queue = f"usage-loss-{uuid.uuid4().hex[:8]}"
    env = {"MCP_WORKER_LOST_CALLS": "requeue", "MCP_WORKER_CALL_MAX_ATTEMPTS": "2", "MCP_WORKER_QUEUE": queue}
    trace = tmp_path / "trace"
    sent = 0
    with (
        running_worker(tmp_path_factory, concurrency=1, queue=queue, extra_env=env) as worker,
        running_daphne(tmp_path_factory, extra_env=env) as server,
    ):
        url = endpoint(server.url, access)
        async with httpx.AsyncClient(timeout=WAIT * 2, limits=httpx.Limits(max_connections=10)) as http:

            async def post(name: str, arguments: dict[str, Any], n: int) -> httpx.Response:
                nonlocal sent
                sent += 1
                body, extra = modern_tool_call(name, arguments, id=n)
                return await http.post(
                    url, headers={**headers(access), **extra, "Accept": "application/json"}, json=body
                )

            async def cancelled(name: str, arguments: dict[str, Any]) -> None:
                """A 2026 call whose client closes its stream at the first progress: the call is cancelled."""
                nonlocal sent
                sent += 1
                body, extra = modern_tool_call(name, arguments, meta={"progressToken": name})
                async with http.stream("POST", url, headers={**headers(access), **extra}, json=body) as response:
                    first = await anext(data_messages(response.aiter_lines()))
                    assert first["method"] == "notifications/progress"

            replies = await asyncio.gather(
                *(post(*INLINE[n % len(INLINE)], n) for n in range(INLINE_CALLS)),
                *(post(name, arguments, 1000 + n) for n, (name, arguments) in enumerate(REFUSED)),
            )
            assert [reply.status_code for reply in replies[:INLINE_CALLS]] == [200] * INLINE_CALLS
            assert all(reply.json()["error"]["code"] == -32050 for reply in replies[4:INLINE_CALLS:5])  # failing
            assert all(reply.json()["error"]["code"] == INVALID_PARAMS for reply in replies[INLINE_CALLS:])

            await cancelled("progress_then_wait", {})
            await cancelled("worker_job", job(trace, "C", 400, 25))
            await wait_for_line(trace, lambda line: line == "C stopped", "the worker call stopping")
            for n in range(EARLIER):
                assert (await post("worker_job", job(trace, f"E{n}", 1), n)).status_code == 200

            async def earlier_written() -> bool:
                return (await orm(counted)).get("worker_job", (0, 0))[0] == EARLIER + 1  # the cancelled one too

            await wait_until(earlier_written, timeout=WAIT, what="the pool process's usage in the ledger")

            for n in range(LATER):
                assert (await post("worker_job", job(trace, f"L{n}", 1), n)).status_code == 200
            killed = asyncio.ensure_future(post("worker_task_job", job(trace, "K", 30, 40), 0))
            found = await wait_for_line(trace, lambda line: line == "K step 3", "the third step")
            pid = int(next(line for line in found if line.startswith("K start")).split()[2])
            os.kill(pid, signal.SIGKILL)  # the pool process running the call, with what it had buffered
            reply = await asyncio.wait_for(killed, WAIT * 2)
            assert reply.json()["result"]["structuredContent"]["done"] == 30, (reply.text, worker.log())
            starts = [int(line.split()[2]) for line in lines(trace) if line.startswith("K start")]
            assert len(starts) == 2 and starts[0] == pid != starts[1]  # it ran again, on the new pool process
            for n in range(AFTER):
                assert (await post("worker_heap", {}, n)).status_code == 200

        async def audit_written() -> bool:
            return await orm(ToolCall.objects.filter(tenant=access.tenant).count) == sent

        await wait_until(audit_written, timeout=WAIT, what="daphne's audit rows")
        logged = await orm(audited)
        exact = set(logged) - {"worker_job"}

        async def exact_written() -> bool:
            ledger = await orm(counted)
            return all(ledger.get(name) == logged[name] for name in exact)

        # The living processes' ledgers (daphne's and the new pool process's) are written within their interval.
        await wait_until(exact_written, timeout=WAIT, what="the ledger to agree with the audit log")

    ledger = await orm(counted)
    assert "nope" not in ledger and ledger["echo"] == (INLINE_CALLS * 2 // 5, 0)  # refused calls are in neither
    assert (ledger["refuse"], ledger["boom"], ledger["failing"]) == ((INLINE_CALLS // 5, INLINE_CALLS // 5),) * 3
    assert ledger["progress_then_wait"] == (1, 1)  # the cancelled inline call, an error
    assert ledger["worker_task_job"] == logged["worker_task_job"] == (1, 0)  # the killed run uncounted, its re-run once
    assert ledger["worker_heap"] == (AFTER, 0)
    # What the killed process had buffered is lost: at most the calls it ended since it was last seen flushing.
    calls, errors = ledger["worker_job"]
    assert logged["worker_job"] == (EARLIER + LATER + 1, 1)
    assert EARLIER + 1 <= calls <= EARLIER + LATER + 1 and errors == 1
    lost = sum(logged[name][0] for name in logged) - sum(ledger[name][0] for name in logged)
    assert 0 <= lost <= LATER


@pytest.fixture
def budgeted_access(settings: Any, transactional_db: None, access_factory: Any) -> Iterator[Access]:
    """A worker tool, and a tool-seconds budget on the tenant (so that its calls' seconds go to a counter)."""
    from mcp_app.models import Budget

    require_broker()
    access = access_factory(tools=("worker_job",))
    budget_counters(settings.REDIS_URL, access.tenant.pk, clear=True)
    Budget.objects.create(tenant=access.tenant, set_by="operator", tool_seconds_per_day=3600)
    yield access
    quiesce()


async def test_a_pool_process_stopped_cleanly_writes_its_usage_and_budget_seconds_first(
    settings: Any, budgeted_access: Access, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """SIGTERM to the worker mid-call: the warm shutdown lets the call finish, then ends the pool process (with
    ``os._exit``); the call is in the ledger and its seconds in the budget counter, nothing lost
    (tests/workers/test_pool_exit.py pins the signal that writes them)."""
    access = budgeted_access
    env = {"MCP_WORKER_QUEUE": f"usage-stop-{uuid.uuid4().hex[:8]}"}
    trace = tmp_path / "trace"
    with (
        running_worker(tmp_path_factory, concurrency=1, queue=env["MCP_WORKER_QUEUE"], extra_env=env) as worker,
        running_daphne(tmp_path_factory, extra_env=env) as server,
    ):
        body, extra = modern_tool_call("worker_job", job(trace, "W", 10, 40))
        async with httpx.AsyncClient(timeout=WAIT) as http:
            pending = asyncio.ensure_future(
                http.post(
                    endpoint(server.url, access),
                    headers={**headers(access), **extra, "Accept": "application/json"},
                    json=body,
                )
            )
            await wait_for_line(trace, lambda line: line == "W step 3", "the call running")
            worker.process.send_signal(signal.SIGTERM)  # the main process only: a warm shutdown
            reply = await asyncio.wait_for(pending, WAIT)
        assert reply.json()["result"]["structuredContent"]["done"] == 10, (reply.text, worker.log())
        assert await asyncio.to_thread(worker.process.wait, STOP_TIMEOUT_SECONDS) == 0, worker.log()
    # The worker is gone: what is written now is all it wrote.
    row = await orm(UsageDay.objects.get, tenant=access.tenant, tool_name="worker_job")
    assert (row.calls, row.errors) == (1, 0) and row.tool_seconds >= 0.36
    counters = budget_counters(settings.REDIS_URL, access.tenant.pk)
    assert [round(value, 6) for key, value in counters.items() if ":tool_seconds:day:" in key] == [
        round(row.tool_seconds, 6)
    ]
