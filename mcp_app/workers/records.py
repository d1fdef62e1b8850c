"""The durable record of a worker call (``ToolTask``): every state change is one conditional UPDATE.

Life of a record: created ``queued`` before dispatch (with its Celery id and deadline), ``working`` when a
worker starts it (``attempts`` + 1, ``started_at``, ``owner``), then terminal: ``completed`` / ``failed`` /
``cancelled`` (``finished_at``), or ``input_required`` for a 2026 task waiting for ``tasks/update``. The outcome
is stored before the broker message is acknowledged, so a worker dying after the tool returned loses nothing;
terminal states never change (``ToolTask.objects.transition``).

How the outcome is stored: ``runtime.durable.columns`` (what ``tasks/get`` shows), plus, for an
``input_required`` outcome, the whole answer in ``result`` so the awaiting process returns it as it was
(``durable.outcome_of`` reads it back).
``call_spec`` is what of a record travels to the worker in the Celery message, so that the worker, which takes
the record with ``take``, reads nothing back.

Sync functions: called from worker threads (``database_sync_to_async``) and from the Celery task.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from ..conf import mcp_settings
from ..models import ToolTask
from ..models.tasks import TERMINAL
from ..protocol.context import Principal
from ..protocol.descriptors import ServerDescription
from ..protocol.errors import InternalError
from ..runtime import durable

WORKER = "worker"


def timeout_of(tool_timeout: float | None) -> float:
    return float(tool_timeout) if tool_timeout else float(mcp_settings.WORKER_CALL_TIMEOUT_SECONDS)


def _ttl_ms(timeout: float) -> int:
    """A plain worker call is kept for re-attachment (idempotency) as long as the longer of the key's TTL and
    the task TTL, counted after its deadline."""
    keep = max(float(mcp_settings.IDEMPOTENCY_TTL_SECONDS), mcp_settings.TASK_TTL_MS / 1000.0)
    return int((timeout + keep) * 1000)


def new_task_id() -> str:
    """Unguessable, like every task id (``ToolTaskManager.create_task``)."""
    return secrets.token_urlsafe(24)


def _insert(task_id: str, ttl_ms: int, **fields: Any) -> ToolTask:
    return ToolTask.objects.insert(
        task_id=task_id, ttl_ms=ttl_ms, expires_at=timezone.now() + timedelta(milliseconds=ttl_ms), **fields
    )


def create(
    *,
    task_id: str,
    server_pk: int,
    agent_pk: int,
    tool_name: str,
    arguments: dict[str, Any],
    timeout: float,
    client_capabilities: dict[str, Any],
    protocol_version: str,
    request_id: str | int | None,
    idempotency_key: str = "",
    client_task: bool = False,
) -> tuple[ToolTask, bool]:
    """A new ``queued`` record, or (with an idempotency key already used by this agent on this server within
    the TTL) the existing one: ``(record, created)``. Race-safe: the unique constraint decides."""
    now = timezone.now()
    fields: dict[str, Any] = {
        "status": ToolTask.Status.QUEUED,
        "execution": WORKER,
        "client_task": client_task,
        "protocol_version": protocol_version,
        "request_id": "" if request_id is None else str(request_id)[:200],
        "idempotency_key": idempotency_key,
        "celery_id": str(uuid.uuid4()),
        "deadline": now + timedelta(seconds=timeout),
        "client_capabilities": client_capabilities,
    }
    ttl = mcp_settings.TASK_TTL_MS if client_task else _ttl_ms(timeout)
    row = {"server_id": server_pk, "agent_id": agent_pk, "tool_name": tool_name, "arguments": arguments, **fields}
    if not idempotency_key:
        return _insert(task_id, ttl, **row), True
    for _attempt in range(3):
        existing = ToolTask.objects.filter(server_id=server_pk, agent_id=agent_pk, idempotency_key=idempotency_key)
        found = existing.first()
        if found is not None:
            horizon = found.created_at + timedelta(seconds=float(mcp_settings.IDEMPOTENCY_TTL_SECONDS))
            if horizon > now and found.tool_name == tool_name:
                return found, False
            # Past its TTL (or for another tool): the key is free again; the old record keeps its history.
            existing.filter(pk=found.pk).update(idempotency_key="")
        try:
            with transaction.atomic():
                return _insert(task_id, ttl, **row), True
        except IntegrityError:
            continue  # another request created it first: attach to that one
    raise InternalError("Could not record the call (idempotency key contention); retry")


def requeue(task_id: str, *, timeout: float) -> ToolTask | None:
    """An existing record (a task resumed by ``tasks/update``) dispatched again: ``queued`` with a new Celery id,
    attempts reset. ``None`` when it is terminal."""
    record = ToolTask.objects.filter(task_id=task_id).first()
    if record is None:
        return None
    moved = ToolTask.objects.transition(
        record.pk,
        status=ToolTask.Status.QUEUED,
        execution=WORKER,
        celery_id=str(uuid.uuid4()),
        attempts=0,
        deadline=timezone.now() + timedelta(seconds=timeout),
        finished_at=None,
    )
    return ToolTask.objects.filter(pk=record.pk).first() if moved else None


def served(server: ServerDescription, principal: Principal | None) -> tuple[dict[str, Any], str] | None:
    """The server as a request was served it, and the agent's id: the ``server`` and ``agent_id`` of
    ``call_spec`` (``None`` when the description lacks the rows or the catalog revision: the worker then loads
    them with the record)."""
    if server.revision is None or server.pk is None or principal is None or principal.tenant_pk is None:
        return None
    catalog_version, created_at = server.revision
    described = {
        "pk": server.pk,
        "server_id": server.server_id,
        "name": server.name,
        "title": server.title,
        "version": server.version,
        "instructions": server.instructions,
        "tenant_pk": principal.tenant_pk,
        "tenant_slug": principal.tenant,
        "catalog_version": catalog_version,
        "created_at": created_at,
    }
    return described, principal.agent_id


def call_spec(record: ToolTask, *, server: dict[str, Any], agent_id: str) -> dict[str, Any]:
    """What a worker needs to run the call of ``record`` besides its state, as it travels in the Celery message
    (JSON): what the record was created with, the server as the client was served it (``server``: its pk, id,
    name, title, version, instructions, tenant pk and slug, catalog version and ``created_at`` in ISO form) and
    the agent's id. None of it changes after dispatch, so the worker reads none of it back."""
    return {
        "task_id": record.task_id,
        "tool_name": record.tool_name,
        "arguments": record.arguments,
        "protocol_version": record.protocol_version,
        "client_capabilities": record.client_capabilities or {},
        "deadline": record.deadline.timestamp() if record.deadline else timezone.now().timestamp(),
        "input_responses": record.input_responses or None,
        "request_state": record.request_state or None,
        "agent_pk": record.agent_id,
        "agent_id": agent_id,
        "server": server,
    }


def take(record_pk: int, celery_id: str, owner: str) -> bool:
    """A worker takes a ``queued`` record dispatched as ``celery_id``: one conditional UPDATE; ``False`` when it
    did not move (then ``untaken`` tells why, and handles redeliveries)."""
    return ToolTask.objects.transition(
        record_pk,
        where={"celery_id": celery_id, "status": ToolTask.Status.QUEUED},
        increment=("attempts",),
        status=ToolTask.Status.WORKING,
        started_at=timezone.now(),
        owner=owner,
    )


def begin(record_pk: int, celery_id: str, owner: str) -> tuple[ToolTask | None, str]:
    """A worker takes the record: ``(record, "run")`` to run it, with its agent, server and tenant loaded (for a
    message that does not carry the call), else ``(record or None, why)`` as ``untaken`` says."""
    if take(record_pk, celery_id, owner):
        return _with_relations(record_pk), "run"
    return untaken(record_pk, celery_id, owner)


def untaken(record_pk: int, celery_id: str, owner: str) -> tuple[ToolTask | None, str]:
    """Why ``take`` moved nothing, after one more read: terminal already, superseded by a newer dispatch, or
    ``working`` already (this message was delivered before, to a worker that died mid-call: run it again, or,
    past the loss policy, fail the record here and say ``"lost"``)."""
    record = ToolTask.objects.filter(pk=record_pk).first()
    if record is None:
        return None, "gone"
    if record.status in TERMINAL or record.status == ToolTask.Status.INPUT_REQUIRED:
        return record, "terminal"
    if record.celery_id and record.celery_id != celery_id:
        return record, "superseded"
    if record.status == ToolTask.Status.WORKING and (
        mcp_settings.WORKER_LOST_CALLS != "requeue" or record.attempts >= mcp_settings.WORKER_CALL_MAX_ATTEMPTS
    ):
        fail_lost(record_pk)
        return ToolTask.objects.filter(pk=record_pk).first(), "lost"
    now = timezone.now()
    moved = (
        ToolTask.objects.filter(pk=record_pk, celery_id=celery_id, status__in=(ToolTask.Status.QUEUED, "working"))
        .exclude(status__in=TERMINAL)
        .update(status=ToolTask.Status.WORKING, attempts=F("attempts") + 1, started_at=now, updated_at=now, owner=owner)
    )
    return _with_relations(record_pk), "run" if moved else "terminal"


def _with_relations(record_pk: int) -> ToolTask | None:
    return ToolTask.objects.select_related("agent", "server", "server__tenant").filter(pk=record_pk).first()


LOST_MESSAGE = "The worker running this call stopped before it finished; run the call again."


def fail_lost(record_pk: int) -> bool:
    """Fail a call whose worker died (the ``fail`` policy, or attempts exhausted)."""
    return store(record_pk, InternalError(LOST_MESSAGE))


def store(record_pk: int, outcome: Any, *, celery_id: str | None = None, where: dict[str, Any] | None = None) -> bool:
    """Record a call's outcome (a result dict, a ProtocolError, another exception); returns whether it moved
    (a cancelled or otherwise terminal record keeps its state; ``celery_id`` and ``where``: only a record whose
    columns still say so)."""
    fields = durable.columns(outcome, keep_answer=True)
    condition = {**(where or {}), **({"celery_id": celery_id} if celery_id is not None else {})}
    return ToolTask.objects.transition(record_pk, where=condition or None, **fields)


def load(record_pk: int) -> ToolTask | None:
    return ToolTask.objects.filter(pk=record_pk).first()


def become_task(record_pk: int) -> ToolTask:
    """The client now knows this worker call as a task: it lives for TASK_TTL_MS from now."""
    from datetime import timedelta

    ttl = mcp_settings.TASK_TTL_MS
    ToolTask.objects.filter(pk=record_pk).update(
        client_task=True, ttl_ms=ttl, expires_at=timezone.now() + timedelta(milliseconds=ttl)
    )
    return ToolTask.objects.get(pk=record_pk)
