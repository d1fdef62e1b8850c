"""The Celery tasks of worker calls (``run_tool_call``, the reaper ``reap_worker_calls``) and the worker's signals
(heartbeats; the call of a lost pool process failed; a pool process's usage written before it exits).

``run_tool_call(record_pk, info)`` runs one call (``execute.execute_in_thread``, in the thread's kept event loop
and channel layer; ``record_pk`` ``None``: a call sent without its record, which the worker writes) and returns
once its outcome is stored: its message is acknowledged after that; on worker loss it is rejected back to the
queue (``WORKER_LOST_CALLS = "requeue"``) or its record failed (docs/workers.md, "liveness"). They are ``shared_task``s of whichever Celery app the project runs (``mcp_app.tasks`` imports them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from celery import Task, shared_task
from celery.signals import task_failure, worker_process_init, worker_process_shutdown, worker_ready, worker_shutdown

from ... import heartbeat
from ...channel_layer import Messaging
from ...conf import mcp_settings

logger = logging.getLogger("mcp_app.workers")

RUN_TASK = "mcp_app.run_tool_call"
REAP_TASK = "mcp_app.reap_worker_calls"
REAP_INTERVAL_SECONDS = 30.0


class ToolCallTask(Task):
    """Acknowledged after the outcome is stored; rejected back to the queue on worker loss per the setting."""

    acks_late = True
    ignore_result = True

    @property
    def reject_on_worker_lost(self) -> bool:
        return bool(mcp_settings.WORKER_LOST_CALLS == "requeue")


_local = threading.local()


def _thread_loop() -> tuple[asyncio.AbstractEventLoop, Messaging]:
    """This worker thread's event loop and channel layer (as its ``Messaging``), made once and kept: each call of
    the thread runs in them (no loop or Redis connections to set up per call). A thread pool has one pair per thread. The loop runs
    in a daemon thread of its own, between calls too: what a call leaves waiting there goes on (an upstream call
    waiting for a stateless client's retry, its inbox on the layer, its expiry; ``federation.calls``)."""
    from ...channel_layer import messaging, use_layer_in_loop
    from .relay import own_layer

    loop = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        layer = own_layer()
        use_layer_in_loop(loop, layer)
        _local.bus = messaging(layer)
        threading.Thread(target=loop.run_forever, name="mcp-worker-loop", daemon=True).start()
        _local.loop = loop
    return loop, _local.bus


@shared_task(bind=True, base=ToolCallTask, name=RUN_TASK)
def run_tool_call(self: Task, record_pk: int | None, info: dict[str, Any]) -> str:
    from .execute import execute_in_thread

    loop, bus = _thread_loop()
    return execute_in_thread(loop, record_pk, str(self.request.id), info, bus=bus)


@task_failure.connect
def _fail_lost_call(sender: Any = None, args: Any = None, exception: Any = None, **_kwargs: Any) -> None:
    """The pool process running a call died and the message was not requeued: fail its record now."""
    if getattr(sender, "name", None) != RUN_TASK or not args:
        return
    from ...models import ToolTask
    from .. import records
    from .reaper import fail

    try:
        if args[0] is not None:
            record = ToolTask.objects.load(int(args[0]))
        else:  # sent unwritten: its record is the one of its task id, if the worker wrote it
            body = args[1] if len(args) > 1 and isinstance(args[1], dict) else {}
            record = ToolTask.objects.by_task_id(str(body.get("task_id") or ""))
        if record is not None:
            fail(record, records.lost(), "failed: its pool process died")
    except Exception:
        logger.exception("could not fail the record of a lost worker call")


@worker_process_init.connect
def _beat_in_pool_process(**_kwargs: Any) -> None:
    """A prefork pool process owns the calls it runs: it beats from its start (``mcp_app.heartbeat``)."""
    heartbeat.start()


@worker_process_shutdown.connect
def _write_usage_before_pool_process_exits(**_kwargs: Any) -> None:
    """A prefork pool process ends with ``os._exit`` (billiard) whenever it stops, on a warm shutdown and when it
    is recycled (``--max-tasks-per-child``) alike, so no ``atexit`` handler of it runs: write what its calls spent
    now (the usage ledger, with the audit log's last flush) and add their tool-seconds and cost to the budget
    counters, else each pool process loses up to one flush interval of usage on every clean stop."""
    from ...limits.budget_meter import meter
    from ...runtime.audit import audit_log

    for flush in (audit_log.stop, meter.stop):
        try:
            flush()
        except Exception:
            logger.exception("a pool process could not write its usage before exiting")


@worker_ready.connect
def _beat_for_queues(sender: Any = None, **_kwargs: Any) -> None:
    """The worker's main process beats for the queues it consumes (``/readyz`` counts them), and for itself
    (the owner of the calls of a thread or solo pool)."""
    names: list[str] = []
    with contextlib.suppress(Exception):
        names = [queue.name for queue in sender.task_consumer.queues]
    if not names:
        with contextlib.suppress(Exception):
            names = list(sender.app.amqp.queues.consume_from or sender.app.amqp.queues)
    heartbeat.consume(names)


@worker_shutdown.connect
def _stop_beating_for_queues(**_kwargs: Any) -> None:
    heartbeat.stop_consuming()


@shared_task(name=REAP_TASK, ignore_result=True)
def reap_worker_calls() -> dict[str, int]:
    """Fail worker calls past their deadline and purge expired records (see ``reaper.reap``)."""
    from . import reaper

    return reaper.reap()
