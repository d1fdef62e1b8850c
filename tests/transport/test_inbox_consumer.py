"""``InboxConsumer`` at its interface: where the work runs, and how its message loop stops it.

Work that cannot outlive its client runs in the application's own task; the loop (the ``http.disconnect`` watch and
the inbox) starts only after ``WATCH_DELAY_SECONDS`` or at the inbox's first event, and stops the work by cancelling
that task, which must not swallow a cancellation that comes from outside (daphne's, for an application that
outlived its client too long). Work in a task of its own has the loop at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.exceptions import StopConsumer

from mcp_app.transport import membership
from mcp_app.transport.membership import InboxConsumer
from tests.helpers import nothing_left_running


class Served(InboxConsumer):
    """Serves a request with work that waits for its release; ``mcp.stop`` stops the work, ``mcp.stop_twice`` stops
    it while the application's task is cancelled from outside as well."""

    own_task = False
    last: Served | None = None
    running = asyncio.Event()  # set once the last request's work runs (made anew for each test)

    async def http_request(self, message: dict[str, Any]) -> None:
        Served.last = self
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.stopped: list[bool] = []
        self.task: asyncio.Task[Any] | None = None
        self.begin(self.serve(), own_task=self.own_task)

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        raise StopConsumer

    async def serve(self) -> None:
        self.task = asyncio.current_task()
        Served.running.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def mcp_stop(self, message: dict[str, Any]) -> None:
        self.stopped.append(await self.stop_work())

    async def mcp_stop_twice(self, message: dict[str, Any]) -> None:
        stopping = asyncio.ensure_future(self.stop_work())
        await asyncio.sleep(0)  # stop_work has cancelled the work: now daphne does too, before the work resumes
        assert self.task is not None
        self.task.cancel()
        self.stopped.append(await stopping)


class ServedAlone(Served):
    own_task = True


async def started(application: Any) -> tuple[ApplicationCommunicator, Served]:
    comm = ApplicationCommunicator(application, {"type": "http", "method": "POST", "path": "/", "headers": []})
    await comm.send_input({"type": "http.request", "body": b"{}"})
    await asyncio.wait_for(Served.running.wait(), timeout=5)
    assert Served.last is not None
    return comm, Served.last


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Served.last = None
    Served.running = asyncio.Event()


async def test_work_that_cannot_outlive_its_client_runs_in_the_application_task() -> None:
    comm, served = await started(Served.as_asgi())
    assert served.task is comm.future
    served.release.set()
    await comm.wait(timeout=5)
    assert not served.cancelled.is_set()


async def test_work_that_may_outlive_its_client_runs_in_a_task_of_its_own() -> None:
    comm, served = await started(ServedAlone.as_asgi())
    assert served.task is not comm.future
    served.release.set()
    await comm.wait(timeout=5)


async def test_an_event_for_the_inbox_stops_the_work_before_the_disconnect_watch_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(membership, "WATCH_DELAY_SECONDS", 60.0)
    comm, served = await started(Served.as_asgi())
    served.put_nowait({"type": "mcp.stop"})
    await asyncio.wait_for(served.cancelled.wait(), timeout=5)
    await comm.wait(timeout=5)  # the application ends normally: the cancellation was the consumer's own
    assert not comm.future.cancelled()
    assert served.stopped == [True]
    await nothing_left_running()


async def test_a_client_that_leaves_stops_the_work_once_the_watch_starts() -> None:
    comm, served = await started(Served.as_asgi())
    await comm.send_input({"type": "http.disconnect"})
    await asyncio.wait_for(served.cancelled.wait(), timeout=5)
    await comm.wait(timeout=5)
    assert not comm.future.cancelled()
    await nothing_left_running()


async def test_a_cancellation_from_outside_ends_the_application_cancelled() -> None:
    comm, served = await started(Served.as_asgi())
    comm.future.cancel()
    await asyncio.wait_for(served.cancelled.wait(), timeout=5)
    await comm.wait(timeout=5)
    assert comm.future.cancelled()
    await nothing_left_running()


async def test_a_cancellation_from_outside_is_not_taken_for_the_consumers_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(membership, "WATCH_DELAY_SECONDS", 60.0)
    comm, served = await started(Served.as_asgi())
    served.put_nowait({"type": "mcp.stop_twice"})
    await asyncio.wait_for(served.cancelled.wait(), timeout=5)
    await comm.wait(timeout=5)
    assert comm.future.cancelled()
    await nothing_left_running()
