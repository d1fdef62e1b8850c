"""Worker calls at the wire, twice over: on a real Celery worker (real daphne, Redis and PostgreSQL), and on
the embedded default (a daphne without Redis runs them in-process, with the same record and events).

Each test binds the test-only worker tools (``tests.tools``: ``worker_job`` leaves a trace file of what it did,
line by line, so a test can tell whether the tool ran, where, how often and how far) and speaks HTTP to daphne;
on a worker the call runs in the worker process (the result names the worker's pid). Without Redis the worker
half skips, or fails under ``MCP_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from mcp_app.models import ToolTask, UsageDay
from tests.conftest import Access
from tests.e2e.conftest import Daphne, running_daphne
from tests.e2e.workers import WAIT, job, lines, modern_tool_call, orm, quiesce, wait_for_line
from tests.helpers import endpoint, initialize, modern_body, routing_headers, wait_until
from tests.helpers import post_headers as headers

pytestmark = pytest.mark.e2e

TASKS = "io.modelcontextprotocol/tasks"
IDEMPOTENCY = "io.mcp-host/idempotencyKey"


@dataclass
class Served:
    daphne: Daphne
    on_worker: bool  # False: the embedded default, calls run in daphne


@pytest.fixture(scope="session")
def embedded_daphne(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daphne]:
    """A daphne without Redis (no broker): worker calls run in its own process."""
    with running_daphne(tmp_path_factory, extra_env={"REDIS_URL": "", "MCP_INVALIDATION": "database"}) as server:
        yield server


@pytest.fixture(params=["worker", "embedded"])
def served(request: pytest.FixtureRequest) -> Served:
    if request.param == "worker":
        request.getfixturevalue("celery_worker")
        return Served(request.getfixturevalue("daphne"), on_worker=True)
    return Served(request.getfixturevalue("embedded_daphne"), on_worker=False)


@pytest.fixture
def worker_access(transactional_db: None, access_factory: Any, served: Served) -> Iterator[Access]:
    yield access_factory(tools=("worker_job", "worker_task_job", "worker_refusal", "worker_heap", "echo"))
    quiesce()


def assert_ran_where_expected(served: Served, pid: int) -> None:
    if served.on_worker:
        assert pid not in (os.getpid(), served.daphne.process.pid)  # it ran in the worker
    else:
        assert pid == served.daphne.process.pid  # in-process, in daphne


def record_of(**filters: Any) -> ToolTask:
    return ToolTask.objects.get(**filters)


async def settled_record(**filters: Any) -> ToolTask:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        record = await orm(ToolTask.objects.filter(**filters).first)
        if record is not None and record.status not in ("queued", "working"):
            return record
        await asyncio.sleep(0.05)
    pytest.fail(f"the record {filters} did not settle: {await orm(ToolTask.objects.filter(**filters).first)}")


async def sse(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: ") and line[len("data: ") :].strip():
            yield orjson.loads(line[len("data: ") :])


async def open_session(http: httpx.AsyncClient, url: str, access: Access) -> dict[str, str]:
    reply = await http.post(url, headers=headers(access), json=initialize({"elicitation": {}}))
    assert reply.status_code == 200
    session = {
        **headers(access),
        "Mcp-Session-Id": reply.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    note = await http.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status_code == 202
    return session


# ---------------------------------------------------------------- progress, both eras


async def test_progress_streams_to_a_legacy_client_over_sse_from_the_worker(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    url = endpoint(daphne.url, worker_access)
    trace = tmp_path / "trace"
    async with httpx.AsyncClient(timeout=WAIT) as http:
        session = await open_session(http, url, worker_access)
        body = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "worker_job", "arguments": job(trace, "L", 3, 20), "_meta": {"progressToken": "tok"}},
        }
        async with http.stream("POST", url, headers=session, json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            messages = [message async for message in sse(response)]
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"], p["total"]) for p in progress] == [
        ("tok", 1, 3),
        ("tok", 2, 3),
        ("tok", 3, 3),
    ]
    result = messages[-1]["result"]["structuredContent"]
    assert messages[-1]["id"] == 5 and result["done"] == 3
    assert_ran_where_expected(served, result["pid"])
    record = await orm(record_of, server=worker_access.server)
    assert (record.execution, record.status, record.attempts, record.client_task) == ("worker", "completed", 1, False)
    assert record.celery_id and record.started_at <= record.finished_at
    assert record.owner.split(":")[1] == str(result["pid"])


async def test_progress_streams_to_a_2026_client_from_the_worker(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    trace = tmp_path / "trace"
    body, extra = modern_tool_call("worker_job", job(trace, "M", 4, 10), meta={"progressToken": 9})
    async with (
        httpx.AsyncClient(timeout=WAIT) as http,
        http.stream(
            "POST", endpoint(daphne.url, worker_access), headers={**headers(worker_access), **extra}, json=body
        ) as response,
    ):
        assert response.status_code == 200
        messages = [message async for message in sse(response)]
    assert [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"] == [1, 2, 3, 4]
    final = messages[-1]["result"]
    assert final["resultType"] == "complete" and final["structuredContent"]["done"] == 4
    assert_ran_where_expected(served, final["structuredContent"]["pid"])


async def test_worker_calls_run_in_a_process_whose_start_up_heap_is_frozen(
    served: Served, worker_access: Access
) -> None:
    # Without it a full collection of the worker's Django and Celery heap paused a call for ~0.1 s now and
    # then (bench/workers.py: p99 110-130 ms against a median of 15).
    body, extra = modern_tool_call("worker_heap", {})
    async with httpx.AsyncClient(timeout=WAIT) as http:
        reply = await http.post(
            endpoint(served.daphne.url, worker_access), headers={**headers(worker_access), **extra}, json=body
        )
    assert reply.status_code == 200
    heap = reply.json()["result"]["structuredContent"]
    assert_ran_where_expected(served, heap["pid"])
    assert heap["frozen"] > 50_000


@pytest.fixture
def celery_access(transactional_db: None, access_factory: Any, celery_worker: Any) -> Iterator[Access]:
    """An agent whose worker tools run on the session's real Celery worker."""
    yield access_factory(tools=("worker_heap",))
    quiesce()


async def test_a_worker_writes_no_log_line_of_its_own_per_call(
    celery_access: Access, daphne: Daphne, celery_worker: Any
) -> None:
    # Celery's "received" and "succeeded" lines cost the worker ~0.3 ms of CPU per call; the record and the
    # audit hold every call (mcp_app.observability.logging.CELERY_TASK_LOGGERS).
    body, extra = modern_tool_call("worker_heap", {})
    async with httpx.AsyncClient(timeout=WAIT) as http:
        reply = await http.post(
            endpoint(daphne.url, celery_access), headers={**headers(celery_access), **extra}, json=body
        )
    assert reply.status_code == 200
    assert reply.json()["result"]["structuredContent"]["pid"] != daphne.process.pid
    record = await settled_record(server=celery_access.server)
    assert record.status == "completed" and record.celery_id
    log = celery_worker.log()
    assert " ready." in log  # the worker does log at INFO
    assert record.celery_id not in log


async def test_the_worker_meters_its_calls_and_writes_them_to_the_usage_ledger(
    celery_access: Access, daphne: Daphne
) -> None:
    """The ledger's rows of worker calls come from the worker process (its audit flusher's thread): daphne never
    runs ``worker_heap`` here, so a row could come from nowhere else."""
    body, extra = modern_tool_call("worker_heap", {})
    async with httpx.AsyncClient(timeout=WAIT) as http:
        for _ in range(3):
            reply = await http.post(
                endpoint(daphne.url, celery_access), headers={**headers(celery_access), **extra}, json=body
            )
            assert reply.json()["result"]["structuredContent"]["pid"] != daphne.process.pid

    def calls() -> int:
        row = UsageDay.objects.filter(tenant=celery_access.tenant, tool_name="worker_heap").first()
        return row.calls if row is not None else 0

    async def all_written() -> bool:
        return await orm(calls) >= 3

    # Bounded polling of rows another process writes (within its flush interval): nothing here to wait on.
    await wait_until(all_written, timeout=WAIT, what="the worker's usage in the ledger")
    row = await orm(UsageDay.objects.get, tenant=celery_access.tenant, tool_name="worker_heap")
    assert (row.calls, row.errors, row.agent_key, row.server_key) == (
        3,
        0,
        celery_access.agent.agent_id,
        celery_access.server.server_id,
    )
    assert row.tool_seconds > 0


async def test_an_elicitation_from_the_worker_reaches_the_legacy_client_and_its_answer_the_tool(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    url = endpoint(daphne.url, worker_access)
    trace = tmp_path / "trace"
    async with httpx.AsyncClient(timeout=WAIT) as http:
        session = await open_session(http, url, worker_access)
        body = {
            "jsonrpc": "2.0",
            "id": 6,
            "method": "tools/call",
            "params": {"name": "worker_job", "arguments": job(trace, "E", 1, ask=True)},
        }
        async with http.stream("POST", url, headers=session, json=body) as response:
            messages = sse(response)
            request = await anext(messages)
            assert request["method"] == "elicitation/create"
            assert request["params"]["message"] == "Go on?"
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"go": True}}}
            posted = await http.post(url, headers=session, json=answer)
            assert posted.status_code == 202
            final = await anext(messages)
    assert final["id"] == 6
    assert final["result"]["structuredContent"]["answer"] == {"action": "accept", "content": {"go": True}}


# ---------------------------------------------------------------- cancellation


async def test_notifications_cancelled_stops_the_tool_on_the_worker_mid_run(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    url = endpoint(daphne.url, worker_access)
    trace = tmp_path / "trace"
    async with httpx.AsyncClient(timeout=WAIT) as http:
        session = await open_session(http, url, worker_access)
        body = {
            "jsonrpc": "2.0",
            "id": 11,
            "method": "tools/call",
            "params": {"name": "worker_job", "arguments": job(trace, "C", 400, 25), "_meta": {"progressToken": 1}},
        }
        async with http.stream("POST", url, headers=session, json=body) as response:
            messages = sse(response)
            first = await anext(messages)
            assert first["method"] == "notifications/progress"
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 11}}
            assert (await http.post(url, headers=session, json=cancel)).status_code == 202
            rest = [message async for message in messages]
    assert not any("id" in message and message.get("id") == 11 for message in rest)  # no answer to a cancelled call
    trace_lines = await wait_for_line(trace, lambda line: line == "C stopped", "the tool stopping")
    assert "C finished" not in trace_lines
    assert len([line for line in trace_lines if line.startswith("C step")]) < 400
    record = await settled_record(server=worker_access.server)
    assert record.status == "cancelled" and record.finished_at is not None


async def test_a_2026_client_closing_its_stream_cancels_the_worker_call(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    trace = tmp_path / "trace"
    body, extra = modern_tool_call("worker_job", job(trace, "S", 400, 25), meta={"progressToken": "s"})
    async with (
        httpx.AsyncClient(timeout=WAIT) as http,
        http.stream(
            "POST", endpoint(daphne.url, worker_access), headers={**headers(worker_access), **extra}, json=body
        ) as response,
    ):
        first = await anext(sse(response))
        assert first["method"] == "notifications/progress"
        # Leaving the block closes the connection mid-stream.
    trace_lines = await wait_for_line(trace, lambda line: line == "S stopped", "the tool stopping")
    assert "S finished" not in trace_lines
    assert (await settled_record(server=worker_access.server)).status == "cancelled"


# On a worker only: the admin (this test process) reaches a call running in another process through Redis.
@pytest.mark.parametrize("served", ["worker"], indirect=True)
async def test_tasks_cancel_and_the_admin_cancel_stop_a_durable_task_on_the_worker(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    from mcp_app.services import cancel_task

    trace = tmp_path / "trace"
    capabilities = {"extensions": {TASKS: {}}}
    url = endpoint(daphne.url, worker_access)
    task_ids = []
    async with httpx.AsyncClient(timeout=WAIT) as http:
        for tag in ("T1", "T2"):
            # T1 carries an idempotency key: once it is a task, tasks/cancel still stops it.
            meta = {IDEMPOTENCY: "t1-key"} if tag == "T1" else {}
            body, extra = modern_tool_call(
                "worker_task_job", job(trace, tag, 400, 25), capabilities=capabilities, meta=meta
            )
            reply = await http.post(url, headers={**headers(worker_access), **extra}, json=body)
            created = reply.json()["result"]
            assert created["resultType"] == "task" and created["status"] == "working"
            task_ids.append(created["taskId"])
        await wait_for_line(trace, lambda line: line == "T1 step 1", "T1 running")
        await wait_for_line(trace, lambda line: line == "T2 step 1", "T2 running")
        cancel = modern_body("tasks/cancel", {"taskId": task_ids[0]}, id=2, capabilities=capabilities)
        ack = await http.post(url, headers={**headers(worker_access), **routing_headers(cancel)}, json=cancel)
        assert {key for key in ack.json()["result"] if key != "_meta"} == {"resultType"}
        # The admin's cancel action: a synchronous call outside any request.
        record = await orm(record_of, task_id=task_ids[1])
        assert await orm(cancel_task, record) is True
        for tag in ("T1", "T2"):
            trace_lines = await wait_for_line(trace, lambda line, tag=tag: line == f"{tag} stopped", f"{tag} stopping")
            assert f"{tag} finished" not in trace_lines
        got = modern_body("tasks/get", {"taskId": task_ids[0]}, id=3, capabilities=capabilities)
        status = await http.post(url, headers={**headers(worker_access), **routing_headers(got)}, json=got)
        assert status.json()["result"]["status"] == "cancelled"
    # One row per call: the worker call's record is the client's task.
    assert await orm(ToolTask.objects.filter(server=worker_access.server).count) == 2
    assert (
        await orm(ToolTask.objects.filter(server=worker_access.server, client_task=True, execution="worker").count) == 2
    )


# ---------------------------------------------------------------- seed 004's task cases, on the worker


async def test_seed_004_task_cases_on_the_worker(served: Served, worker_access: Access) -> None:
    daphne = served.daphne
    url = endpoint(daphne.url, worker_access)
    declaring = {"extensions": {TASKS: {}}}
    async with httpx.AsyncClient(timeout=WAIT) as http:

        async def post(body: dict[str, Any], **extra: str) -> httpx.Response:
            return await http.post(url, headers={**headers(worker_access), **routing_headers(body), **extra}, json=body)

        body, _ = modern_tool_call("worker_refusal", {"reason": "no"}, capabilities=declaring)
        created = (await post(body)).json()["result"]
        assert created["resultType"] == "task"
        got = (await post(modern_body("tasks/get", {"taskId": created["taskId"]}, id=2, capabilities=declaring))).json()
        deadline = time.monotonic() + WAIT
        while got["result"]["status"] == "working" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            got = (
                await post(modern_body("tasks/get", {"taskId": created["taskId"]}, id=2, capabilities=declaring))
            ).json()
        assert got["result"]["resultType"] == "complete"
        assert got["result"]["status"] == "completed"
        assert got["result"]["result"]["isError"] is True
        assert got["result"]["result"]["content"][0]["text"] == "no"
        record = await orm(record_of, task_id=created["taskId"])
        assert record.execution == "worker" and record.client_task and record.attempts == 1

        silent, _ = modern_tool_call("worker_refusal", {})
        refused = await post(silent)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == -32021

        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            extra = {"inputResponses": {}} if method == "tasks/update" else {}
            unknown = await post(modern_body(method, {"taskId": "no-such-task", **extra}, id=4, capabilities=declaring))
            assert unknown.json()["error"]["code"] == -32602, method

        cancel = modern_body("tasks/cancel", {"taskId": created["taskId"]}, id=5, capabilities=declaring)
        ack = (await post(cancel)).json()["result"]
        assert {key for key in ack if key != "_meta"} == {"resultType"}

        mismatch = modern_body("tasks/get", {"taskId": created["taskId"]}, id=6, capabilities=declaring)
        wrong = await post(mismatch, **{"mcp-name": "a-different-task"})
        assert wrong.status_code == 400 and wrong.json()["error"]["code"] == -32020


# ---------------------------------------------------------------- many calls, idempotency


async def orm_unlimited(access: Access) -> None:
    """No concurrency limit for this access's tenant and agent (0: unlimited), published to every process."""
    from asgiref.sync import sync_to_async

    from mcp_app.models import Agent, Tenant

    def lift() -> None:
        for model, pk in ((Tenant, access.tenant.pk), (Agent, access.agent.pk)):
            row = model.objects.get(pk=pk)
            row.max_worker_calls = 0
            row.save()

    await sync_to_async(lift)()


async def test_200_concurrent_worker_calls_all_complete_exactly_once(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    trace = tmp_path / "trace"
    url = endpoint(daphne.url, worker_access)
    count = 200
    # Room for all 200 at once (the default quotas would refuse most of them: -32010, tested in test_worker_quotas).
    await orm_unlimited(worker_access)
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(timeout=60.0, limits=limits) as http:

        async def one(n: int) -> dict[str, Any]:
            body, extra = modern_tool_call("worker_job", job(trace, f"n{n}", 1), id=n)
            reply = await http.post(
                url, headers={**headers(worker_access), **extra, "Accept": "application/json"}, json=body
            )
            assert reply.status_code == 200, reply.text
            return reply.json()

        replies = await asyncio.gather(*(one(n) for n in range(count)))
    assert sorted(reply["id"] for reply in replies) == list(range(count))
    assert all(reply["result"]["structuredContent"]["tag"] == f"n{reply['id']}" for reply in replies)
    starts = [line.split()[0] for line in lines(trace) if " start " in line]
    assert sorted(starts) == sorted(f"n{n}" for n in range(count))  # each ran once, none twice, none lost
    statuses = await orm(
        lambda: list(ToolTask.objects.filter(server=worker_access.server).values_list("status", "attempts"))
    )
    assert sorted(statuses) == [("completed", 1)] * count


async def test_a_re_sent_call_with_the_same_idempotency_key_runs_the_tool_once(
    served: Served, worker_access: Access, tmp_path: Path
) -> None:
    daphne = served.daphne
    """The client loses its stream mid-call, then re-sends the call (a new request id, the same key): it gets
    the first call's result; the tool ran once."""
    trace = tmp_path / "trace"
    url = endpoint(daphne.url, worker_access)
    arguments = job(trace, "I", 20, 25)
    async with httpx.AsyncClient(timeout=WAIT) as http:
        body, extra = modern_tool_call(
            "worker_job", arguments, id="first", meta={IDEMPOTENCY: "k-1", "progressToken": 1}
        )
        async with http.stream("POST", url, headers={**headers(worker_access), **extra}, json=body) as response:
            assert (await anext(sse(response)))["method"] == "notifications/progress"
        # The stream is gone; the call goes on (a keyed call is not cancelled by a closed stream).
        body, extra = modern_tool_call("worker_job", arguments, id="again", meta={IDEMPOTENCY: "k-1"})
        again = await http.post(
            url, headers={**headers(worker_access), **extra, "Accept": "application/json"}, json=body
        )
    result = again.json()["result"]["structuredContent"]
    assert again.json()["id"] == "again" and result["done"] == 20
    assert len([line for line in lines(trace) if line.startswith("I start")]) == 1
    record = await orm(record_of, server=worker_access.server)
    assert (record.idempotency_key, record.status, record.attempts) == ("k-1", "completed", 1)
