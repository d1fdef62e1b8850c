"""The worker's side of a call, as a Celery worker thread runs it (``execute.execute_in_thread``): the call travels
in the message (``records.call_spec``), so the worker reads nothing back. Taking the record and storing the
outcome are its only queries, run in the worker thread itself (no hop to another thread)."""

from __future__ import annotations

import asyncio
import dataclasses
import select
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from mcp_app.channel_layer import LayerMessaging, local_bus, messaging
from mcp_app.models import ToolTask
from mcp_app.protocol.reporters import ProgressReporter
from mcp_app.workers import records
from mcp_app.workers.message import (
    VERSION,
    CallSpec,
    Done,
    Notify,
    Progress,
    Served,
    WorkerMessage,
    event_from_wire,
    event_to_wire,
)
from mcp_app.workers.running import execute, relay
from mcp_app.workers.running.context import loaded_spec
from mcp_app.workers.serving import admission, dispatch
from mcp_app.workers.serving import inbox as worker_inbox
from tests.conftest import require_redis
from tests.helpers import (
    close_connections_of_async_threads,  # noqa: F401  (same clean-up here)
    wait_until_blocking,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _dispatch(access: Any, *, with_call: bool = True) -> tuple[ToolTask, dict[str, Any]]:
    """A record and the message a serving process sends for it (``dispatch.message``)."""
    record, _ = ToolTask.objects.create_worker_call(
        task_id=records.new_task_id(),
        server_pk=access.server.pk,
        agent_pk=access.agent.pk,
        tool_name="worker_job",
        arguments={"tag": "t", "steps": 2},
        timeout=60,
        client_capabilities={},
        protocol_version="2026-07-28",
        request_id=1,
    )
    info: dict[str, Any] = {"era": "modern", "log_level": None, "progress": False, "can_ask": False}
    message = {**info, "task_id": record.task_id}
    if with_call:  # what the serving process knows of the call, here read from the record's own relations
        loaded = ToolTask.objects.select_related("agent", "server", "server__tenant").get(pk=record.pk)
        message["call"] = dataclasses.asdict(loaded_spec(loaded))
    return record, message


def _statements(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"].split(" ", 1)[0] for query in queries.captured_queries]


def test_a_warm_worker_call_costs_two_updates_and_no_read(access_factory: Any, loop: Any) -> None:
    access = access_factory(tools=("worker_job",))
    first, message = _dispatch(access)
    assert execute.execute_in_thread(loop, first.pk, first.celery_id, message, bus=local_bus) == "stored"  # warm
    record, message = _dispatch(access)
    with CaptureQueriesContext(connection) as queries:
        state = execute.execute_in_thread(loop, record.pk, record.celery_id, message, bus=local_bus)
    assert state == "stored"
    assert _statements(queries) == ["UPDATE", "UPDATE"]  # taken (queued -> working), then the outcome
    record.refresh_from_db()
    assert (record.status, record.attempts, record.result["structuredContent"]["done"]) == ("completed", 1, 2)
    assert record.owner and record.started_at and record.finished_at


def _unwritten(access: Any) -> tuple[ToolTask, dict[str, Any]]:
    """A call as a serving process sends one that only it awaits (``dispatch.dispatch_unwritten``): no row, the
    record (unsaved, as the serving process knows it) and a message that carries what the worker writes."""
    record, message = _dispatch(access)
    ToolTask.objects.filter(pk=record.pk).delete()
    record.pk = None
    message["unwritten"] = {
        "queued_at": record.created_at.timestamp(),
        "ttl_ms": record.ttl_ms,
        "request_id": record.request_id,
    }
    return record, message


def test_a_call_sent_unwritten_costs_one_insert_and_one_update(access_factory: Any, loop: Any) -> None:
    """The worker writes the record when it takes the call: one INSERT (``working``), then the outcome's UPDATE;
    the row is the one the serving process would have written."""
    access = access_factory(tools=("worker_job",))
    first, message = _unwritten(access)
    assert execute.execute_in_thread(loop, None, first.celery_id, message, bus=local_bus) == "stored"  # warm
    sent, message = _unwritten(access)
    with CaptureQueriesContext(connection) as queries:
        state = execute.execute_in_thread(loop, None, sent.celery_id, message, bus=local_bus)
    assert state == "stored"
    assert _statements(queries) == ["INSERT", "UPDATE"]
    record = ToolTask.objects.get(task_id=sent.task_id)
    assert (record.status, record.attempts, record.result["structuredContent"]["done"]) == ("completed", 1, 2)
    assert record.owner and record.started_at and record.finished_at
    for field in ("celery_id", "request_id", "ttl_ms", "expires_at", "deadline", "execution", "tool_name"):
        assert getattr(record, field) == getattr(sent, field), field
    assert (record.server_id, record.agent_id, record.client_task, record.arguments) == (
        access.server.pk,
        access.agent.pk,
        False,
        {"tag": "t", "steps": 2},
    )


@pytest.mark.parametrize("why", ["cancelled", "no worker took it"])
def test_a_tombstone_keeps_a_call_sent_unwritten_from_running(
    why: str, access_factory: Any, loop: Any, settings: Any
) -> None:
    """Cancelled before a worker took it (``durable.cancel``), or judged lost by the awaiting process's clock
    (``liveness.read_unwritten``): the tombstone it leaves makes the late delivery skip the call."""
    from django.test import override_settings

    from mcp_app.workers.serving import liveness

    access = access_factory(tools=("worker_job",))
    sent, message = _unwritten(access)
    if why == "cancelled":
        assert ToolTask.objects.cancel_unwritten(sent)
    else:
        assert liveness.read_unwritten(sent).pk is None  # not overdue yet: still the record as dispatched
        with override_settings(MCP_APP={**settings.MCP_APP, "WORKER_QUEUE_TIMEOUT_SECONDS": 0.001}):
            failed = liveness.read_unwritten(sent)
        assert failed.pk is not None and failed.status == "failed" and "No worker took" in failed.error["message"]
    assert execute.execute_in_thread(loop, None, sent.celery_id, message, bus=local_bus) == "terminal"
    record = ToolTask.objects.get(task_id=sent.task_id)
    assert record.status == ("cancelled" if why == "cancelled" else "failed")
    assert (record.attempts, record.owner, record.started_at, record.result) == (0, "", None, None)


def test_a_cancellation_after_the_worker_wrote_the_record_cancels_that_record(access_factory: Any) -> None:
    access = access_factory(tools=("worker_job",))
    sent, message = _unwritten(access)
    spec = WorkerMessage.from_wire(message)
    assert spec.call is not None and spec.unwritten is not None
    taken = records.unwritten(spec.call, spec.unwritten, sent.celery_id)
    assert ToolTask.objects.take_unwritten(taken, "someone")
    assert ToolTask.objects.cancel_unwritten(sent)  # the tombstone loses to the row: the row is cancelled
    assert ToolTask.objects.get(task_id=sent.task_id).status == "cancelled"
    assert ToolTask.objects.filter(task_id=sent.task_id).count() == 1


@pytest.mark.parametrize(("policy", "outcome"), [("requeue", "completed"), ("fail", "failed")])
def test_a_call_sent_unwritten_delivered_again_after_its_worker_died_is_judged_by_its_record(
    policy: str, outcome: str, access_factory: Any, loop: Any, settings: Any
) -> None:
    """The message comes back (its worker died after writing the record ``working``): the second delivery finds
    the row, and runs the call again or fails it per ``WORKER_LOST_CALLS``, one row either way."""
    from django.test import override_settings

    access = access_factory(tools=("worker_job",))
    sent, message = _unwritten(access)
    spec = WorkerMessage.from_wire(message)
    assert spec.call is not None and spec.unwritten is not None
    assert ToolTask.objects.take_unwritten(records.unwritten(spec.call, spec.unwritten, sent.celery_id), "dead")
    with override_settings(MCP_APP={**settings.MCP_APP, "WORKER_LOST_CALLS": policy}):
        state = execute.execute_in_thread(loop, None, sent.celery_id, message, bus=local_bus)
    assert state == ("stored" if policy == "requeue" else "lost")
    record = ToolTask.objects.get(task_id=sent.task_id)
    assert record.status == outcome and record.attempts == (2 if policy == "requeue" else 1)


def _where_steps_run(monkeypatch: Any) -> list[str]:
    seen: list[str] = []
    take, store = ToolTask.objects.take, ToolTask.objects.store

    def taking(*args: Any) -> bool:
        seen.append(threading.current_thread().name)
        return take(*args)

    def storing(*args: Any, **kwargs: Any) -> bool:
        seen.append(threading.current_thread().name)
        return store(*args, **kwargs)

    monkeypatch.setattr(ToolTask.objects, "take", taking)
    monkeypatch.setattr(ToolTask.objects, "store", storing)
    return seen


def test_a_main_thread_runs_the_database_steps_itself(access_factory: Any, loop: Any, monkeypatch: Any) -> None:
    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access)
    seen = _where_steps_run(monkeypatch)
    assert execute.execute_in_thread(loop, record.pk, record.celery_id, message, bus=local_bus) == "stored"
    assert seen == [threading.main_thread().name] * 2  # prefork and solo workers: no hop at all


@pytest.mark.django_db(transaction=True)  # the database thread has a connection of its own
def test_threads_of_a_pool_hand_the_database_steps_to_one_database_thread(
    access_factory: Any, monkeypatch: Any
) -> None:
    access = access_factory(tools=("worker_job",))
    dispatched = [_dispatch(access) for _ in range(3)]
    seen = _where_steps_run(monkeypatch)
    states: list[str] = []

    def pool_thread(record: ToolTask, message: dict[str, Any]) -> None:
        own = asyncio.new_event_loop()
        try:
            states.append(execute.execute_in_thread(own, record.pk, record.celery_id, message, bus=local_bus))
        finally:
            own.close()

    threads = [threading.Thread(target=pool_thread, args=pair) for pair in dispatched]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        execute._database_thread().submit(connections.close_all).result(timeout=10)
    assert states == ["stored"] * 3
    assert len(seen) == 6 and len(set(seen)) == 1 and seen[0].startswith("mcp-worker-db")
    assert ToolTask.objects.filter(status="completed", pk__in=[r.pk for r, _ in dispatched]).count() == 3


@pytest.mark.django_db(transaction=True)  # the database thread has a connection of its own
def test_the_database_thread_keeps_its_connection_between_calls_and_replaces_one_the_server_closed(
    access_factory: Any, monkeypatch: Any
) -> None:
    """No hand-back to the pool and no check round trip per call (``execute._sound``): the next call runs on the
    same connection; one the server terminated meanwhile is noticed without a query and replaced, and the call
    runs."""
    if connection.vendor != "postgresql":
        pytest.skip("a connection the server closes: PostgreSQL")
    access = access_factory(tools=("worker_job",))
    database = execute._database_thread()

    def run_in_a_pool_thread(record: ToolTask, message: dict[str, Any]) -> tuple[str, Any, int]:
        own = asyncio.new_event_loop()
        try:
            state = execute.execute_in_thread(own, record.pk, record.celery_id, message, bus=local_bus)
        finally:
            own.close()
        raw = database.submit(lambda: connection.connection).result(timeout=10)
        return state, raw, raw.info.backend_pid

    def in_a_thread(record: ToolTask, message: dict[str, Any]) -> tuple[str, Any, int]:
        outcome: list[tuple[str, Any, int]] = []
        thread = threading.Thread(target=lambda: outcome.append(run_in_a_pool_thread(record, message)))
        thread.start()
        thread.join(timeout=30)
        return outcome[0]

    taken: list[Any] = []
    try:
        first = in_a_thread(*_dispatch(access))
        pool = connection.pool
        if pool is None:
            pytest.skip("the deployment's pooled connections")
        getconn = pool.getconn
        monkeypatch.setattr(pool, "getconn", lambda *args, **kwargs: taken.append(1) or getconn(*args, **kwargs))
        second = in_a_thread(*_dispatch(access))
        assert first[0] == second[0] == "stored"
        assert second[1] is first[1] and taken == []  # kept: not handed back, nor taken (and checked) again
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [second[2]])
        wait_until_blocking(lambda: bool(select.select([second[1].fileno()], [], [], 0)[0]))
        third = in_a_thread(*_dispatch(access))
        assert third[0] == "stored" and third[2] != second[2] and taken == [1]
    finally:
        database.submit(connections.close_all).result(timeout=10)


def test_a_message_without_the_call_loads_it_with_the_record(access_factory: Any, loop: Any) -> None:
    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access, with_call=False)  # e.g. queued by an older version
    assert execute.execute_in_thread(loop, record.pk, record.celery_id, message, bus=local_bus) == "stored"
    record.refresh_from_db()
    assert record.status == "completed" and record.result["structuredContent"]["done"] == 2


def test_a_message_of_the_older_shape_still_runs(access_factory: Any, loop: Any) -> None:
    """A message queued by a version before ``WorkerMessage`` (no ``version`` key: the dict the serving process
    used to merge by hand) still runs the call to its stored outcome."""
    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access)
    assert "version" not in message
    assert execute.execute_in_thread(loop, record.pk, record.celery_id, message, bus=local_bus) == "stored"
    record.refresh_from_db()
    assert record.status == "completed"


def test_the_worker_message_is_read_back_as_written_and_in_its_older_shape() -> None:
    served = Served(1, "s", "S", "", "1", "", 2, "t", 3, "2026-12-01T00:00:00+00:00")
    spec = CallSpec("t1", "echo", {}, "2026-07-28", {}, 1.0, 4, "a", served, {"a": {"action": "accept"}})
    current = WorkerMessage(era="modern", progress=True, can_ask=True, cancel_channel="c!1").with_call(spec)
    wire = current.to_wire()
    assert wire["version"] == VERSION
    assert WorkerMessage.from_wire(orjson.loads(orjson.dumps(wire))) == current
    assert current.task_id == "t1" and current.input_responses == {"a": {"action": "accept"}}
    # Version 1: the answers at the top level (a resumed task's), no call, no version.
    older = {"era": "modern", "log_level": "info", "task_id": "t2", "input_responses": {"b": {}}, "request_state": "s"}
    read = WorkerMessage.from_wire(older)
    assert (read.task_id, read.log_level, read.input_responses, read.request_state, read.call) == (
        "t2",
        "info",
        {"b": {}},
        "s",
        None,
    )


def test_the_tenants_time_zone_travels_with_the_call_and_older_messages_count_in_utc() -> None:
    """The worker meters the call on the tenant's day without a query: the zone is in the message; a message
    queued before it was (no ``time_zone``) still runs, counting in UTC."""
    served = Served(1, "s", "S", "", "1", "", 2, "t", 3, "2026-12-01T00:00:00+00:00", time_zone="Asia/Tokyo")
    spec = CallSpec("t1", "echo", {}, "2026-07-28", {}, 1.0, 4, "a", served)
    wire = orjson.loads(orjson.dumps(WorkerMessage(era="modern").with_call(spec).to_wire()))
    read = WorkerMessage.from_wire(wire).call
    assert read is not None and read.server.time_zone == "Asia/Tokyo"
    del wire["call"]["server"]["time_zone"]
    older = WorkerMessage.from_wire(wire).call
    assert older is not None and older.server.time_zone == "UTC"


@pytest.mark.django_db(transaction=True)  # the in-process driver's database steps run in another thread
def test_the_worker_gives_the_quota_slot_back_before_it_announces_done(access_factory: Any, loop: Any) -> None:
    """The slot is free when ``done`` arrives, and ``done`` says so: the awaiting process only stops holding it."""
    from mcp_app.events import worker_group
    from mcp_app.limits import quotas
    from mcp_app.workers.serving.inbox import listen

    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access)
    tenant, agent = access.server.tenant_id, access.agent.pk

    async def run() -> tuple[Any, Any]:
        lease = await quotas.acquire(record.task_id, tenant_pk=tenant, agent_pk=agent, tenant_limit=0, agent_limit=0)
        queue, leave = await listen(worker_group(record.task_id), local_bus)
        try:
            work = asyncio.ensure_future(execute.execute(record.pk, record.celery_id, message, bus=local_bus))
            while not isinstance(event := await asyncio.wait_for(queue.get(), 10), Done):
                pass
            held = quotas.running_calls(tenants=[tenant])[0][tenant]
            await asyncio.wait_for(work, 10)
        finally:
            await leave()
        lease.released_elsewhere()
        for _turn in range(3):  # the lease's renewal, cancelled, ends
            await asyncio.sleep(0)
        return event, held

    event, held = loop.run_until_complete(run())
    assert event.released is True and event.result is not None and held == 0
    assert event_from_wire(event_to_wire(event, "g")) == ("g", event)


def test_a_cancelled_record_is_not_taken(access_factory: Any, loop: Any) -> None:
    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access)
    assert ToolTask.objects.cancel(record.pk)
    assert execute.execute_in_thread(loop, record.pk, record.celery_id, message, bus=local_bus) == "terminal"
    record.refresh_from_db()
    assert (record.status, record.attempts, record.started_at) == ("cancelled", 0, None)


class _Recording:
    """A real channel layer whose group membership changes, receives and sends are recorded."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.joined: list[tuple[str, str]] = []
        self.left: list[tuple[str, str]] = []
        self.received: list[str] = []  # channels a receive was started on
        self.sent: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.layer, name)

    async def group_add(self, group: str, channel: str) -> None:
        self.joined.append((group, channel))
        await self.layer.group_add(group, channel)

    async def group_discard(self, group: str, channel: str) -> None:
        self.left.append((group, channel))
        await self.layer.group_discard(group, channel)

    async def receive(self, channel: str) -> Any:
        self.received.append(channel)
        return await self.layer.receive(channel)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        self.sent.append(channel)
        await self.layer.send(channel, message)


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("enrolled", [True, False], ids=["enrolled-by-the-dispatcher", "joined-by-the-worker"])
def test_a_call_hears_its_cancellation_on_the_channel_its_dispatcher_enrolled(
    access_factory: Any, tmp_path: Any, enrolled: bool
) -> None:
    """The dispatcher enrols the call's cancellation channel in its task group (``admission.enrol``): the worker
    joins nothing itself, a ``tasks/cancel`` sent to the group stops the tool mid-run, and the worker takes its
    channel out of the group when the call ends. A message without the channel (an older dispatcher) has the
    worker join the group on a channel of its own, with the same outcome."""

    from mcp_app.events import TASK_CANCEL_EVENT, task_group, worker_cancel_channel

    require_redis()
    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access)
    trace = tmp_path / "trace"
    message["call"]["arguments"] = {"path": str(trace), "tag": "c", "steps": 200, "interval_ms": 20}
    if enrolled:
        message["cancel_channel"] = worker_cancel_channel(record.task_id)
    group = task_group(record.task_id)
    layer = _Recording(relay.own_layer())
    loop = asyncio.new_event_loop()
    try:
        if enrolled:
            loop.run_until_complete(admission.enrol(record.task_id, messaging()))
        states: list[str] = []
        worker = threading.Thread(
            target=lambda: states.append(
                execute.execute_in_thread(loop, record.pk, record.celery_id, message, bus=LayerMessaging(layer))
            )
        )
        worker.start()
        wait_until_blocking(
            lambda: "c step 2" in (trace.read_text() if trace.exists() else ""),
            timeout=10,
            interval=0.01,
            what="the tool starting",
        )
        ToolTask.objects.cancel(record.pk)

        async def cancel() -> None:
            sender = relay.own_layer()
            await sender.group_send(group, {"type": TASK_CANCEL_EVENT})
            await sender.close_pools()

        asyncio.run(cancel())
        worker.join(timeout=10)
        assert not worker.is_alive() and states == ["cancelled"]
    finally:
        execute._database_thread().submit(connections.close_all).result(timeout=10)
        if not loop.is_closed():
            loop.run_until_complete(layer.layer.close_pools())
            loop.close()
    lines = trace.read_text().splitlines()
    assert "c stopped" in lines and "c finished" not in lines and len(lines) < 50
    if enrolled:
        assert layer.joined == []  # no round trip to join: the dispatcher enrolled the channel
        assert layer.left == [(group, worker_cancel_channel(record.task_id))]
    else:
        assert len(layer.joined) == 1 and layer.joined[0][0] == group and "!" in layer.joined[0][1]
        assert layer.left == layer.joined
    assert ToolTask.objects.get(pk=record.pk).status == "cancelled"


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cancelled_first", [False, True], ids=["a-short-call", "a-call-cancelled-before-it-receives"])
def test_the_enrolled_channel_is_received_from_once_the_call_has_run_a_while(
    access_factory: Any, tmp_path: Any, cancelled_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that ends within ``RECEIVE_AFTER_SECONDS`` never receives on its enrolled cancellation channel (no
    receive, no stop message to itself: the round trips every short call paid), and still leaves the group; a
    cancellation sent before the worker receives waits in the channel and stops the tool once it does."""

    from mcp_app.events import TASK_CANCEL_EVENT, task_group, worker_cancel_channel

    require_redis()
    if not cancelled_first:
        # "Short" is relative to the delay: a one-step call takes 40-140 ms on a loaded machine (its database
        # writes), so the delay is made long enough that the call surely ends within it, whatever the load.
        monkeypatch.setattr(relay, "RECEIVE_AFTER_SECONDS", 30.0)
    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access)
    trace = tmp_path / "trace"
    steps, interval_ms = (200, 20) if cancelled_first else (1, 0)
    message["call"]["arguments"] = {"path": str(trace), "tag": "e", "steps": steps, "interval_ms": interval_ms}
    channel = worker_cancel_channel(record.task_id)
    message["cancel_channel"] = channel
    group = task_group(record.task_id)
    layer = _Recording(relay.own_layer())
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(admission.enrol(record.task_id, messaging()))
        if cancelled_first:
            loop.run_until_complete(layer.layer.group_send(group, {"type": TASK_CANCEL_EVENT}))
        state = execute.execute_in_thread(loop, record.pk, record.celery_id, message, bus=LayerMessaging(layer))
    finally:
        loop.run_until_complete(layer.layer.close_pools())
        loop.close()
    lines = trace.read_text().splitlines()
    assert layer.left == [(group, channel)] and layer.joined == []
    if cancelled_first:
        assert state == "cancelled"
        assert "e stopped" in lines and "e finished" not in lines and len(lines) < 50
        assert layer.received == [channel]
        assert ToolTask.objects.get(pk=record.pk).status == "cancelled"
    else:
        assert state == "stored" and lines[-1] == "e finished"
        assert layer.received == [] and layer.sent == []
        assert ToolTask.objects.get(pk=record.pk).status == "completed"


@pytest.mark.services
def test_the_queued_message_shows_monitoring_the_record_never_the_tool_arguments(
    access_factory: Any, settings: Any
) -> None:
    """What Celery's monitoring shows of a queued call (its ``argsrepr`` header, read here from the real broker
    queue): the record's pk and task id prefix; the tool's arguments travel only in the body."""
    import base64
    import json
    import uuid

    import redis

    require_redis()
    queue = f"argsrepr-test-{uuid.uuid4().hex[:8]}"
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_QUEUE": queue}
    access = access_factory(tools=("worker_job",))
    record, message = _dispatch(access)
    served = (Served(**message["call"]["server"]), message["call"]["agent_id"])
    record.arguments = {"api_key": "sk-live-do-not-show", "steps": 1}
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        dispatch.send(record, WorkerMessage(era="modern"), served)
        queued = broker.lrange(queue, 0, -1)
        assert len(queued) == 1
        envelope = json.loads(queued[0])
        headers = envelope["headers"]
        assert headers["id"] == record.celery_id and headers["task"] == "mcp_app.run_tool_call"
        assert headers["argsrepr"] == f"({record.pk}, <call {record.task_id[:8]}…>)"
        assert headers["kwargsrepr"] == "{}"
        assert "sk-live" not in json.dumps(headers)
        body = base64.b64decode(envelope["body"]).decode()
        assert "sk-live-do-not-show" in body  # the worker still gets the call
    finally:
        broker.delete(queue)
        broker.close()


@pytest.mark.services
async def test_a_refused_call_leaves_no_cancellation_channel_enrolled(monkeypatch: Any) -> None:
    """A call refused at admission was never dispatched: its event group is left and the cancellation channel
    enrolled for it meanwhile is taken out of its task group again."""
    from channels.layers import get_channel_layer

    from mcp_app.events import task_group, worker_group
    from mcp_app.protocol.context import Principal
    from mcp_app.protocol.errors import QuotaExceeded

    require_redis()

    async def refuse(principal: Any, call_id: str) -> None:
        raise QuotaExceeded("tenant", 0)

    monkeypatch.setattr(admission, "admit", refuse)
    layer = get_channel_layer()
    task_id = records.new_task_id()
    principal = Principal(tenant="t", agent_id="a", tenant_pk=1, agent_pk=1)
    try:
        with pytest.raises(QuotaExceeded):
            await admission.listen_and_admit(task_id, principal, messaging())
        connection = layer.connection(0)
        assert await connection.zrange(layer._group_key(task_group(task_id)), 0, -1) == []
        assert await connection.zrange(layer._group_key(worker_group(task_id)), 0, -1) == []
    finally:
        await worker_inbox.close_inbox()


@pytest.mark.services
async def test_one_channel_hears_every_awaited_call_and_hands_each_event_to_the_waits_of_its_call() -> None:
    """An event loop awaits all its worker calls on one channel (``runner._Inbox``): each call's event group has
    that channel as its member while a wait of the call lasts, each event reaches only the waits of the call it
    names, an event naming no call reaches nobody, and the receive loop ends with ``close_inbox``."""
    from channels.layers import get_channel_layer

    from mcp_app.events import WORKER_EVENT, worker_group

    require_redis()
    layer = get_channel_layer()
    sender = relay.own_layer()
    connection = layer.connection(0)
    call_a, call_b = records.new_task_id(), records.new_task_id()
    a, b = worker_group(call_a), worker_group(call_b)

    async def members(group: str) -> list[bytes]:
        return list(await connection.zrange(layer._group_key(group), 0, -1))

    async def heard(queue: asyncio.Queue[Any]) -> list[Any]:
        got = [(await asyncio.wait_for(queue.get(), 5)).message["n"]]
        while not queue.empty():
            got.append(queue.get_nowait().message["n"])
        return got

    try:
        first_a, leave_first_a = await worker_inbox.listen(a, messaging())
        only_b, leave_b = await worker_inbox.listen(b, messaging())
        second_a, leave_second_a = await worker_inbox.listen(a, messaging())
        inbox = worker_inbox._inboxes[asyncio.get_running_loop()]
        assert inbox.subscription is not None
        channel = inbox.subscription.address
        assert "!" in channel
        assert await members(a) == await members(b) == [channel.encode()]
        await relay.Relay(call_a, messaging(sender)).publish(Notify({"n": 1}))
        await sender.group_send(a, {"type": WORKER_EVENT, "kind": "notify", "message": {"n": "no group"}})
        await sender.group_send(b, {"type": WORKER_EVENT, "group": b, "kind": "notify", "message": {"n": 2}})
        await sender.group_send(a, {"type": WORKER_EVENT, "group": a, "kind": "notify", "message": {"n": 3}})
        await asyncio.sleep(0.2)  # all four delivered to this process
        assert await heard(first_a) == [1, 3]
        assert await heard(second_a) == [1, 3]
        assert await heard(only_b) == [2]
        await leave_first_a()
        assert await members(a) == [channel.encode()]  # the other wait of the call still listens
        await leave_second_a()
        await leave_b()
        assert await members(a) == await members(b) == []
        subscription = inbox.subscription
        assert not subscription.ended.is_set()
    finally:
        await worker_inbox.close_inbox()
        await sender.close_pools()
    assert subscription.ended.is_set() and asyncio.get_running_loop() not in worker_inbox._inboxes


@pytest.mark.services
async def test_the_receive_loop_of_worker_events_keeps_no_request_context(monkeypatch: Any) -> None:
    """The inbox's receive loop outlives the request that starts it: it must not carry that request's context
    (the log context of one tenant's request would label everything it logs afterwards)."""
    import contextvars

    from mcp_app.events import worker_group

    require_redis()
    request = contextvars.ContextVar("request", default="none")
    seen: list[str] = []
    from mcp_app import channel_layer

    receive = channel_layer._LayerSubscription._run

    async def probed(subscription: Any, receive_after: float) -> None:
        seen.append(request.get())
        await receive(subscription, receive_after)

    monkeypatch.setattr(channel_layer._LayerSubscription, "_run", probed)
    request.set("tenant-a request")
    try:
        _queue, leave = await worker_inbox.listen(worker_group(records.new_task_id()), messaging())
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        await leave()
    finally:
        await worker_inbox.close_inbox()
    assert seen == ["none"]


async def test_progress_crosses_as_typed_data_and_is_encoded_once_with_the_clients_token() -> None:
    """The worker relays a report as ``Progress`` (no token); the awaiting process encodes the client's
    ``notifications/progress`` with the request's own token. A progress notification of an older worker still
    reaches the client the same way."""
    sent: list[dict[str, Any]] = []

    async def emit(message: dict[str, Any]) -> None:
        sent.append(message)

    call = SimpleNamespace(progress=ProgressReporter("client-token", emit))
    event = orjson.loads(orjson.dumps(event_to_wire(Progress(1, 4, "one"), "mcp.wcall.a")))
    assert "progressToken" not in orjson.dumps(event).decode()
    received = event_from_wire(event)
    assert received is not None and received[0] == "mcp.wcall.a"
    report = received[1]
    assert isinstance(report, Progress)
    await worker_inbox.progressed(report, call)  # type: ignore[arg-type]
    older = {"method": "notifications/progress", "params": {"progressToken": 0, "progress": 2, "total": 4}}
    await worker_inbox.pass_on(older, call)  # type: ignore[arg-type]
    assert event_from_wire({"kind": "progress", "progress": None}) is None
    assert [message["params"] for message in sent] == [
        {"progressToken": "client-token", "progress": 1, "total": 4, "message": "one"},
        {"progressToken": "client-token", "progress": 2, "total": 4},
    ]


def test_each_message_of_a_worker_call_is_typed_and_an_older_one_is_still_read() -> None:
    """Every message a worker call sends between processes goes through its one ``to_wire``/``from_wire``; the
    shape an older version sent (no ``version``) is read the same, and no message is taken for another kind."""
    from mcp_app.events import TASK_CANCEL_EVENT, TASK_STATUS_EVENT, WORKER_ANSWER, WORKER_EVENT
    from mcp_app.runtime.durable import Cancel, StatusChanged
    from mcp_app.workers.message import Answer, Ask

    def wire(message: dict[str, Any]) -> dict[str, Any]:
        return orjson.loads(orjson.dumps(message))

    assert Cancel.from_wire(wire(Cancel().to_wire())) == Cancel.from_wire({"type": TASK_CANCEL_EVENT}) == Cancel()
    changed = StatusChanged.from_wire(wire(StatusChanged().to_wire()))
    assert changed == StatusChanged.from_wire({"type": TASK_STATUS_EVENT}) == StatusChanged()
    assert StatusChanged.from_wire(Cancel().to_wire()) is None and Cancel.from_wire(StatusChanged().to_wire()) is None
    answer = Answer(3, {"result": {"ok": True}})
    older_answer = {"type": WORKER_ANSWER, "id": 3, "answer": {"result": {"ok": True}}}
    assert Answer.from_wire(wire(answer.to_wire())) == Answer.from_wire(older_answer) == answer
    ask = Ask(2, "elicitation/create", {"message": "?"}, "reply.1")
    older_ask = {"type": WORKER_EVENT, "group": "g", "kind": "request", "id": 2, "method": "elicitation/create"}
    older_ask |= {"params": {"message": "?"}, "reply": "reply.1"}
    assert event_from_wire(wire(event_to_wire(ask, "g"))) == event_from_wire(older_ask) == ("g", ask)
    assert Cancel.from_wire(answer.to_wire()) is None and Answer.from_wire(Cancel().to_wire()) is None
    assert event_from_wire(answer.to_wire()) is None
