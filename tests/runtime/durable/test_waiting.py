"""``runtime.durable.until_settled``, the one wait for a durable record: events relayed and settling the wait, the
record re-read on a bounded back-off when none comes (with its hook), a record gone, and cancellation. Records are
unsaved ``ToolTask`` rows read through a scripted ``read``, except where the default read by primary key is tested."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from mcp_app.models import ToolTask
from mcp_app.runtime import durable
from mcp_app.runtime.durable import waiting

WORKING, COMPLETED, INPUT_REQUIRED = ToolTask.Status.WORKING, ToolTask.Status.COMPLETED, ToolTask.Status.INPUT_REQUIRED
FOREVER = 3600.0  # no re-read in the test's time: only events move the wait
EVENT = {"type": "probe"}


def task(status: str) -> ToolTask:
    return ToolTask(pk=7, task_id="t7", status=status)


class Reads:
    """A ``read`` that returns the scripted records in turn (the last one again when they run out)."""

    def __init__(self, *records: ToolTask | None) -> None:
        self.records = list(records)
        self.count = 0

    async def __call__(self) -> ToolTask | None:
        self.count += 1
        return self.records.pop(0) if len(self.records) > 1 else self.records[0]


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays the wait asks for, each timing out at once (no event ever arrives in time): no sleeping."""
    asked: list[float] = []

    async def timed_out(awaitable: Coroutine[Any, Any, Any], timeout: float) -> Any:
        asked.append(timeout)
        awaitable.close()
        raise TimeoutError

    monkeypatch.setattr(waiting, "wait_for", timed_out)
    return asked


async def test_a_settled_or_gone_record_returns_at_once_without_reading() -> None:
    reads, events = Reads(None), asyncio.Queue[dict[str, Any]]()
    done = task(COMPLETED)
    assert await durable.until_settled(done, events, read=reads, every=FOREVER) is done
    assert await durable.until_settled(None, events, read=reads, every=FOREVER) is None
    assert reads.count == 0


async def test_each_event_goes_to_on_event_in_order_and_a_carried_settled_record_ends_the_wait() -> None:
    events, seen = asyncio.Queue[dict[str, Any]](), []
    carried = task(COMPLETED)

    async def on_event(event: dict[str, Any]) -> ToolTask | bool:
        seen.append(event["n"])
        if event["n"] == 2:
            return task(WORKING)  # a carried record that is not settled does not end the wait
        return carried if event["n"] == 3 else False

    for n in range(5):
        events.put_nowait({"n": n})
    reads = Reads(task(WORKING))
    assert await durable.until_settled(task(WORKING), events, read=reads, every=FOREVER, on_event=on_event) is carried
    assert (seen, reads.count) == ([0, 1, 2, 3], 0)  # a carried record is not read back
    assert events.qsize() == 1


async def test_an_event_that_says_changed_reads_the_record_now() -> None:
    events = asyncio.Queue[dict[str, Any]]()
    reads = Reads(task(WORKING), task(COMPLETED))
    waiter = asyncio.ensure_future(durable.until_settled(task(WORKING), events, read=reads, every=FOREVER))
    events.put_nowait(EVENT)  # without ``on_event`` every event means the record changed
    events.put_nowait(EVENT)
    settled = await waiter
    assert (settled.status if settled else None, reads.count) == (COMPLETED, 2)


async def test_an_event_after_which_the_record_is_gone_ends_the_wait_with_none() -> None:
    events = asyncio.Queue[dict[str, Any]]()
    events.put_nowait(EVENT)
    assert await durable.until_settled(task(WORKING), events, read=Reads(None), every=FOREVER) is None


async def test_without_events_the_record_is_reread_on_a_doubling_bounded_backoff(delays: list[float]) -> None:
    reads = Reads(*[task(WORKING)] * 5, task(COMPLETED))
    settled = await durable.until_settled(task(WORKING), asyncio.Queue(), read=reads, every=0.5, most=5.0)
    assert settled is not None and settled.status == COMPLETED
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert reads.count == 6


async def test_without_a_ceiling_the_recheck_interval_is_fixed(delays: list[float]) -> None:
    reads = Reads(task(WORKING), task(WORKING), task(COMPLETED))
    await durable.until_settled(task(WORKING), asyncio.Queue(), read=reads, every=2.0)
    assert delays == [2.0, 2.0, 2.0]


async def test_the_recheck_hook_sees_each_unsettled_read_and_resets_the_backoff_when_it_moved_it(
    delays: list[float],
) -> None:
    reads = Reads(task(WORKING), task(WORKING), task(WORKING), task(COMPLETED))
    hooked: list[ToolTask] = []

    async def on_recheck(record: ToolTask) -> bool:
        hooked.append(record)
        return len(hooked) == 2  # the second re-read re-dispatched the call

    await durable.until_settled(task(WORKING), asyncio.Queue(), read=reads, every=0.5, most=5.0, on_recheck=on_recheck)
    assert delays == [0.5, 1.0, 0.5, 1.0]
    assert len(hooked) == 3  # never for the settled read


async def test_a_record_gone_on_a_recheck_ends_the_wait_with_none(delays: list[float]) -> None:
    async def hook(record: ToolTask) -> bool:
        pytest.fail("the hook ran on a record that is gone")

    gone = await durable.until_settled(task(WORKING), asyncio.Queue(), read=Reads(None), every=1, on_recheck=hook)
    assert gone is None


async def test_done_decides_what_settles(delays: list[float]) -> None:
    parked = task(INPUT_REQUIRED)
    assert await durable.until_settled(parked, asyncio.Queue(), read=Reads(parked), every=1) is parked
    reads = Reads(parked, task(COMPLETED))
    finished = await durable.until_settled(parked, asyncio.Queue(), read=reads, every=1, done=durable.terminal)
    assert finished is not None and finished.status == COMPLETED


async def test_cancelling_the_wait_reaches_the_caller_and_leaves_the_events_queued() -> None:
    events, reads = asyncio.Queue[dict[str, Any]](), Reads(task(WORKING))
    waiter = asyncio.ensure_future(durable.until_settled(task(WORKING), events, read=reads, every=FOREVER))
    await asyncio.sleep(0)  # it waits for an event
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    events.put_nowait(EVENT)
    assert (events.qsize(), reads.count) == (1, 0)  # nobody consumes events after the wait ended


async def test_cancelling_while_on_event_runs_cancels_the_wait() -> None:
    events, entered = asyncio.Queue[dict[str, Any]](), asyncio.Event()

    async def on_event(event: dict[str, Any]) -> ToolTask | bool:
        entered.set()
        await asyncio.Event().wait()  # relaying (an ask to the client) takes its time
        return False

    events.put_nowait(EVENT)
    waiter = asyncio.ensure_future(
        durable.until_settled(task(WORKING), events, read=Reads(task(WORKING)), every=FOREVER, on_event=on_event)
    )
    await entered.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


@pytest.mark.django_db(transaction=True)
async def test_by_default_the_record_is_read_back_by_its_primary_key(
    make_record: Callable[..., Awaitable[ToolTask]],
) -> None:
    record, events = await make_record(), asyncio.Queue[dict[str, Any]]()
    await ToolTask.objects.filter(pk=record.pk).aupdate(status=COMPLETED)
    events.put_nowait(EVENT)
    settled = await durable.until_settled(record, events, every=FOREVER)
    assert settled is not None and (settled.pk, settled.status) == (record.pk, COMPLETED)
    assert await durable.reload(record.pk + 10_000) is None
