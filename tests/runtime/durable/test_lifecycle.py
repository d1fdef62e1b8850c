"""``runtime.durable.lifecycle``: work followed in this process settles its record once, and every cancellation,
from this process, another thread or another process, stops it. Against the configured database and channel
layer (PostgreSQL and Redis, or the embedded SQLite and in-memory layer)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from mcp_app.channel_layer import local_bus, messaging
from mcp_app.events import TASK_CANCEL_EVENT, task_group
from mcp_app.models import ToolTask
from mcp_app.protocol.errors import InternalError
from mcp_app.runtime import durable
from tests.helpers import nothing_left_running, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MakeRecord = Callable[..., Awaitable[ToolTask]]
RESULT = {"content": [{"type": "text", "text": "done"}]}
PROBE = "probe"  # an execution kind of these tests' own, with a stopper (``stop_with``)
stopped: list[str] = []
durable.stop_with(PROBE, lambda record: stopped.append(record.task_id))


class Announcements:
    """An ``announce`` callback that counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        self.count += 1


async def until(release: asyncio.Event, outcome: Any = RESULT) -> Any:
    """Work that ends when ``release`` is set, returning (or raising) ``outcome``."""
    await release.wait()
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def status_of(record: ToolTask) -> ToolTask:
    return await ToolTask.objects.aget(pk=record.pk)


@pytest.fixture(autouse=True)
async def _settled(own_channel_layer: Any) -> Any:
    """Every test's work, settlements and cancel listeners end in its own loop, on its own channel layer instance:
    nothing is left receiving when the loop closes."""
    yield
    await durable.drain()
    await nothing_left_running()


async def test_followed_work_is_registered_then_settles_its_record_and_announces(make_record: MakeRecord) -> None:
    record, release, announce = await make_record(), asyncio.Event(), Announcements()
    work = asyncio.ensure_future(until(release))
    durable.follow(record, work, columns=durable.columns, announce=announce)
    assert durable.running(record.task_id) is work

    release.set()
    await durable.drain()
    settled = await status_of(record)
    assert (settled.status, settled.result, announce.count) == ("completed", RESULT, 1)
    assert durable.running(record.task_id) is None


async def test_failed_work_fails_its_record_without_the_exceptions_text(
    make_record: MakeRecord, caplog: pytest.LogCaptureFixture
) -> None:
    record, release = await make_record(), asyncio.Event()
    work = asyncio.ensure_future(until(release, RuntimeError("password=hunter2")))
    durable.follow(record, work, columns=durable.columns)
    release.set()
    with caplog.at_level(logging.ERROR, logger="mcp_app.runtime.durable"):
        await durable.drain()
    settled = await status_of(record)
    assert settled.status == "failed" and settled.error == InternalError().to_wire()
    assert f"task {record.task_id[:8]} of tool slow failed" in caplog.text  # the operator's log has the traceback


async def test_a_record_settled_meanwhile_keeps_its_state_and_is_not_announced(make_record: MakeRecord) -> None:
    record, release, announce = await make_record(), asyncio.Event(), Announcements()
    work = asyncio.ensure_future(until(release))
    durable.follow(record, work, columns=durable.columns, announce=announce)
    await sync_to_async(ToolTask.objects.transition)(record.pk, status="failed", status_message="reaped")

    release.set()
    await durable.drain()
    settled = await status_of(record)
    assert (settled.status, settled.status_message, settled.result, announce.count) == ("failed", "reaped", None, 0)


async def test_cancel_stops_the_work_running_here_once(make_record: MakeRecord) -> None:
    record, announce = await make_record(), Announcements()
    work = asyncio.ensure_future(until(asyncio.Event()))
    durable.follow(record, work, columns=durable.columns, announce=announce)

    assert await durable.cancel(record, "Stop it") is True
    await durable.drain()
    settled = await status_of(record)
    assert work.cancelled() and (settled.status, settled.status_message) == ("cancelled", "Stop it")
    assert announce.count == 1
    assert await durable.cancel(record) is False  # terminal: stays as it is


async def test_cancel_now_from_another_thread_stops_the_work_on_its_loop(make_record: MakeRecord) -> None:
    record = await make_record()
    work = asyncio.ensure_future(until(asyncio.Event()))
    durable.follow(record, work, columns=durable.columns)

    moved = await sync_to_async(durable.cancel_now, thread_sensitive=False)(record, "By the admin")
    await wait_until(work.done, what="the work stopped")
    assert moved and work.cancelled()
    assert (await status_of(record)).status_message == "By the admin"


async def test_a_cancel_on_the_task_group_stops_the_work_here(make_record: MakeRecord) -> None:
    """What another process's ``cancel`` sends (``stop`` without the work in its register)."""
    bus = messaging()
    assert bus is not local_bus  # both configurations have a channel layer
    record = await make_record()
    work = asyncio.ensure_future(until(asyncio.Event()))
    durable.follow(record, work, columns=durable.columns)

    async def sent_and_heard() -> bool:  # until the listener has joined the group (no event says when)
        await bus.group_send(task_group(record.task_id), {"type": TASK_CANCEL_EVENT})
        await asyncio.sleep(0.02)
        return work.done()

    await wait_until(sent_and_heard, what="the cancel reached the work")
    assert work.cancelled()
    await durable.drain()
    assert (await status_of(record)).status == "working"  # stopped unrecorded (a shutdown): orphan recovery's


async def test_a_cancel_recorded_before_the_listener_joined_is_read_from_the_record(make_record: MakeRecord) -> None:
    record = await make_record()
    await sync_to_async(ToolTask.objects.cancel)(record.pk, "Cancelled elsewhere")
    work = asyncio.ensure_future(until(asyncio.Event()))
    durable.follow(record, work, columns=durable.columns)
    await wait_until(work.done, what="the work stopped")
    assert work.cancelled()


async def test_a_kinds_stoppers_run_even_when_someone_else_recorded_the_cancel(make_record: MakeRecord) -> None:
    probe = await make_record(execution=PROBE)
    await sync_to_async(ToolTask.objects.cancel)(probe.pk)
    assert await durable.cancel(probe) is False
    assert stopped.count(probe.task_id) == 1

    inline = await make_record()  # no stoppers: a terminal record's work is left alone
    work = asyncio.ensure_future(until(asyncio.Event()))
    durable.follow(inline, work, columns=durable.columns)
    await sync_to_async(ToolTask.objects.transition)(inline.pk, status="completed")
    assert await durable.cancel(inline) is False
    await asyncio.sleep(0)
    assert not work.done()
    work.cancel()


async def test_drain_is_bounded() -> None:
    release = asyncio.Event()
    durable.keep(asyncio.ensure_future(release.wait()))
    with pytest.raises(TimeoutError):
        await durable.drain(within=0.05)
    release.set()
    await durable.drain()
