"""Running one worker call where it runs: a Celery worker, or the serving process when no broker is configured.

The life of a call is written once (``_steps`` of a ``call.WorkerCall``: listen for its cancellation, take the
record, run the tool, store the outcome, give the quota slot back, announce ``done``) and driven by ``execute()``
in an event loop (the serving process, no broker; a Celery thread pool's thread hands it to its kept loop, with
the database steps in the process's one database thread) or, in a Celery worker's main thread (prefork, solo),
by ``execute_in_thread()`` between turns of the thread's kept loop (database steps in the main thread itself).
Both return only after the outcome is stored. Design: docs/workers.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.db import close_old_connections, connection

from ...channel_layer import Messaging
from ...sockets import readable
from ..message import WorkerMessage
from .call import WorkerCall

logger = logging.getLogger("mcp_app.workers")


@dataclass(frozen=True)
class _Sync:
    """A step of ``_steps`` that runs as plain synchronous code: a database step (``fresh``: the first of the
    call, which retires an old or broken connection first)."""

    function: Callable[[], Any]
    fresh: bool = False

    def __call__(self) -> Any:
        if self.fresh and not connection.in_atomic_block and not _sound(connection):
            close_old_connections()  # never inside a transaction
        return self.function()


#: How long a worker keeps its database connection between calls without handing it back (see ``_sound``).
KEEP_CONNECTION_SECONDS = 60.0


def _sound(wrapper: Any) -> bool:
    """Whether the thread's open connection may serve the next call as it is, without Django retiring it (which,
    pooled with ``CONN_MAX_AGE = 0``, hands it back to the pool after every call, and the pool's check costs a
    round trip to the server when it is taken again; unpooled, Django's health check does): it was opened less
    than ``KEEP_CONNECTION_SECONDS`` ago (or ``CONN_MAX_AGE`` ago, when longer), no error and no stray
    autocommit setting since, and its socket holds nothing to read. A server that closed it (a restart, an
    administrator, an idle timeout) has sent its notice or end of stream by then, so the check costs no round
    trip; any doubt and Django's own retirement and checks apply."""
    raw = wrapper.connection
    if raw is None or wrapper.errors_occurred or wrapper.get_autocommit() != wrapper.settings_dict["AUTOCOMMIT"]:
        return False
    max_age = wrapper.settings_dict["CONN_MAX_AGE"]
    if max_age is not None and wrapper.close_at is not None:
        opened = wrapper.close_at - max_age
        if time.monotonic() >= opened + max(float(max_age), KEEP_CONNECTION_SECONDS):
            return False
    try:
        return not readable(raw.fileno())
    except (OSError, ValueError, AttributeError):
        return False


@dataclass(frozen=True)
class _Async:
    """A step of ``_steps`` that runs in the call's event loop."""

    coroutine: Callable[[], Coroutine[Any, Any, Any]]


Step = _Sync | _Async


def _steps(call: WorkerCall) -> Generator[Step, Any, str]:
    """The life of one worker call, written once for both drivers (``execute`` in an event loop,
    ``execute_in_thread`` in a Celery worker thread): listen, take the record, run, store, give the quota slot back and announce."""
    yield _Async(call.listen)
    try:
        verdict = yield _Sync(call.take, fresh=True)
    except BaseException:
        yield _Async(call.close)
        raise
    if verdict != "run":
        yield _Async(call.skip)
        return str(verdict)
    try:
        outcome = yield _Async(call.run)
        stored = yield _Sync(functools.partial(call.settle, outcome))
    except BaseException:
        yield _Async(call.close)
        raise
    yield _Async(functools.partial(call.announce, outcome, stored))
    return "cancelled" if outcome is None else "stored"


class _Stepper:
    """Feeds ``_steps`` what each of its steps gave (a value, or the exception it raised, which the steps may
    handle or re-raise); ``step`` is the next one to run, ``None`` once ``state`` says how the call ended."""

    def __init__(self, call: WorkerCall) -> None:
        self._steps = _steps(call)
        self.step: Step | None = next(self._steps)
        self.state = ""

    def succeed(self, value: Any) -> None:
        self._advance(lambda: self._steps.send(value))

    def fail(self, error: BaseException) -> None:
        self._advance(lambda: self._steps.throw(error))

    def _advance(self, resume: Callable[[], Step]) -> None:
        try:
            self.step = resume()
        except StopIteration as end:
            self.step, self.state = None, str(end.value)


async def execute(
    record_pk: int | None,
    celery_id: str,
    info: dict[str, Any] | WorkerMessage,
    *,
    bus: Messaging,
    database: ThreadPoolExecutor | None = None,
) -> str:
    """Run the call of record ``record_pk`` (dispatched as ``celery_id``) to its stored outcome, in this event
    loop, its messages on ``bus``; returns what happened: "stored", "cancelled", or why it did not run. Database
    steps run in ``database`` (a Celery worker's one database thread), else as ``database_sync_to_async`` runs
    them (the serving process, no broker)."""
    message = info if isinstance(info, WorkerMessage) else WorkerMessage.from_wire(info)
    stepper = _Stepper(WorkerCall(record_pk, celery_id, message, bus))
    while (step := stepper.step) is not None:
        try:
            if isinstance(step, _Sync) and database is not None:
                value = await asyncio.get_running_loop().run_in_executor(database, step)
            elif isinstance(step, _Sync):
                value = await database_sync_to_async(step.function)()
            else:
                value = await step.coroutine()
        except BaseException as error:
            stepper.fail(error)
        else:
            stepper.succeed(value)
    return stepper.state


def execute_in_thread(
    loop: asyncio.AbstractEventLoop,
    record_pk: int | None,
    celery_id: str,
    info: dict[str, Any] | WorkerMessage,
    *,
    bus: Messaging,
) -> str:
    """``execute`` for a Celery worker thread, with the thread's own event ``loop``. In the process's main thread
    (prefork, solo) the database steps run in the thread itself, between turns of the loop (which runs the other
    steps): one connection per process either way. A thread of a thread pool hands the whole call to its loop,
    whose database steps go to the process's one database thread (so that 50 threads do not hold 50
    connections): one hop into the loop and back per call, not one per step."""
    message = info if isinstance(info, WorkerMessage) else WorkerMessage.from_wire(info)
    if threading.current_thread() is not threading.main_thread():
        return str(_run_in(loop, execute(record_pk, celery_id, message, bus=bus, database=_database_thread())))
    stepper = _Stepper(WorkerCall(record_pk, celery_id, message, bus))
    while (step := stepper.step) is not None:
        try:
            value = _run_in(loop, step.coroutine()) if isinstance(step, _Async) else step()
        except BaseException as error:
            stepper.fail(error)
        else:
            stepper.succeed(value)
    return stepper.state


def _run_in(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coroutine`` in ``loop``: in its own thread when it runs there (a Celery worker thread's loop runs
    between calls too, ``tasks._thread_loop``), else here until it completes."""
    if not loop.is_running():
        return loop.run_until_complete(coroutine)
    future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    try:
        return future.result()
    except concurrent.futures.CancelledError as cancelled:  # the coroutine was cancelled: as run_until_complete says
        raise asyncio.CancelledError() from cancelled
    except BaseException:
        future.cancel()  # interrupted here (a time limit, a shutdown): the coroutine does not go on by itself
        raise


@functools.cache
def _database_thread() -> ThreadPoolExecutor:
    """The database steps of a thread pool's worker calls: one thread, one kept connection, per process."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-worker-db")
