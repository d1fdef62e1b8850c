"""Sending a worker call to the workers (the routing runner; ``liveness`` for a re-queued call; sync functions but
one): ``broker_configured()``, the Celery ``message`` of a record, ``send`` it (the record failed when the broker is
unreachable), ``request_info``, ``create_and_dispatch``/``requeue_and_dispatch``, ``dispatch_unwritten`` (a call
only this process awaits: the message is its only copy until a worker writes its record, docs/workers.md; a
coroutine: on a Redis broker the message is pushed from the event loop, ``broker.DirectPublisher``) and
``revoke_celery_task``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import logging
from typing import Any

from ...conf import mcp_settings
from ...events import worker_cancel_channel
from ...models import ToolTask
from ...protocol.context import CallContext
from ...protocol.errors import InternalError
from ...runtime import durable
from .. import records
from ..message import Served, Unwritten, WorkerMessage

logger = logging.getLogger("mcp_app.workers")


def broker_configured() -> bool:
    """Whether worker calls go to Celery (``WORKER_DISPATCH``: "celery", "in_process" or "auto": Celery when the
    current Celery app is not eager and has a broker other than ``memory://``)."""
    mode = mcp_settings.WORKER_DISPATCH
    if mode != "auto":
        return bool(mode == "celery")
    from celery import current_app

    conf = current_app.conf
    return not conf.task_always_eager and not str(conf.broker_url or "memory://").startswith("memory")


def message(record: ToolTask, info: WorkerMessage, served: tuple[Served, str] | None) -> dict[str, Any]:
    """What the worker is handed with the record's pk (``WorkerMessage``, as JSON): ``info``, the task id, the
    cancellation channel enrolled for it (``admission.enrol``) and the call (``records.call_spec``); for a record
    not written (no pk), what else the worker writes it with (``Unwritten``)."""
    described = dataclasses.replace(info, task_id=record.task_id, cancel_channel=worker_cancel_channel(record.task_id))
    if record.pk is None:
        described = dataclasses.replace(
            described, unwritten=Unwritten(record.created_at.timestamp(), record.ttl_ms, record.request_id)
        )
    if served is not None:
        described = described.with_call(records.call_spec(record, server=served[0], agent_id=served[1]))
    return described.to_wire()


def _argsrepr(record: ToolTask) -> str:
    """What monitoring (``celery inspect``, Flower, events) shows of the arguments: the record, never the tool's
    arguments (they may hold secrets); nor need Celery render the whole message on every call."""
    return f"({record.pk}, <call {record.task_id[:8]}…>)"


def send(record: ToolTask, info: WorkerMessage, served: tuple[Served, str] | None) -> None:
    from ..running.tasks import run_tool_call

    body = message(record, info, served)
    try:
        options = {"queue": mcp_settings.WORKER_QUEUE} if mcp_settings.WORKER_QUEUE else {}
        run_tool_call.apply_async(
            args=[record.pk, body], task_id=record.celery_id, argsrepr=_argsrepr(record), kwargsrepr="{}", **options
        )
    except Exception as error:
        raise _unreachable(record, error) from error


def _unreachable(record: ToolTask, error: Exception) -> InternalError:
    """No broker: the record must not stay queued for a worker that will never see it (one not written stays
    unwritten: nobody but this request knows of the call)."""
    logger.error("could not queue worker call %s: %s: %s", record.task_id[:8], type(error).__name__, error)
    unreachable = InternalError("The worker queue is unreachable; retry shortly")
    if record.pk is not None:
        ToolTask.objects.store(record.pk, durable.columns(unreachable))
    return unreachable


def request_info(call: CallContext) -> WorkerMessage:
    """What the worker needs to know of the request besides the record."""
    return WorkerMessage(
        era=call.request.era,
        log_level=call.log.threshold,
        progress=call.progress.enabled,
        can_ask=call.outbound.can_request,
        in_task=call.in_task,
        input_responses=dict(call.input_responses) if call.input_responses else None,
        request_state=call.request_state,
    )


def create_and_dispatch(
    task_id: str, fields: dict[str, Any], info: WorkerMessage, served: tuple[Served, str] | None, celery: bool
) -> tuple[ToolTask, bool]:
    record, created = ToolTask.objects.create_worker_call(task_id=task_id, **fields)
    if created and celery:
        send(record, info, served)
    return record, created


async def dispatch_unwritten(record: ToolTask, info: WorkerMessage, served: tuple[Served, str]) -> None:
    """Send a new call without writing its record (``record``: ``ToolTask.objects.worker_call``, unsaved,
    ``queued``); the worker that takes it writes it (``take_unwritten``). For a call that only this process can
    await: no idempotency key, not a task and unable to become one. No database query. On a Redis broker where
    kombu would only push the message on a list (``broker.direct_publisher``), one ``LPUSH`` from this event loop;
    else Celery's publish in a thread of the loop's pool, in a copy of this context as ``sync_to_async`` would
    (the trace, which Celery's instrumentation puts in the message, and the log context go with it)."""
    from ...broker import direct_publisher  # Celery and kombu: imported with the broker, never without one
    from ..running.tasks import run_tool_call

    publisher = direct_publisher(run_tool_call.app, run_tool_call, mcp_settings.WORKER_QUEUE)
    if publisher is None:
        blocking = functools.partial(contextvars.copy_context().run, send, record, info, served)
        await asyncio.get_running_loop().run_in_executor(None, blocking)
        return
    try:
        await publisher.publish(record.celery_id, [None, message(record, info, served)], _argsrepr(record))
    except Exception as error:
        raise _unreachable(record, error) from error


def requeue_and_dispatch(
    task_id: str, timeout: float, info: WorkerMessage, served: tuple[Served, str] | None, celery: bool
) -> ToolTask | None:
    record = ToolTask.objects.requeue(task_id, timeout=timeout)
    if record is not None and celery:
        send(record, info, served)
    return record


def revoke_celery_task(celery_id: str) -> None:
    """Revoke a dispatched call's Celery task (a worker that has not started it skips it); never raises."""
    if not broker_configured():
        return
    from celery import current_app

    try:
        current_app.control.revoke(celery_id)
    except Exception as error:  # the record is cancelled already; a worker that starts it skips it
        logger.warning("could not revoke Celery task %s: %s", celery_id, error)
