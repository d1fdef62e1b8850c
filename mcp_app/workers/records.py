"""What of a worker call's durable record (``ToolTask``) is the workers', not a row verb: its timeout, a new task
id, the server as it was ``served``, the call the Celery message carries (``call_spec``), the record a worker
writes of a call dispatched ``unwritten`` and the outcome of a call whose worker died (``lost``). The record's
verbs are ``ToolTask.objects``'; its columns, ``runtime.durable.columns``.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from ..conf import mcp_settings
from ..models import ToolTask
from ..models.tasks import WORKER
from ..protocol.context import Principal
from ..protocol.descriptors import ServerDescription
from ..protocol.errors import InternalError
from ..runtime import durable
from .message import CallSpec, Served, Unwritten

__all__ = ["LOST_MESSAGE", "WORKER", "call_spec", "lost", "new_task_id", "served", "timeout_of", "unwritten"]

LOST_MESSAGE = "The worker running this call stopped before it finished; run the call again."


def timeout_of(tool_timeout: float | None) -> float:
    return float(tool_timeout) if tool_timeout else float(mcp_settings.WORKER_CALL_TIMEOUT_SECONDS)


def new_task_id() -> str:
    """Unguessable, like every task id (``ToolTaskManager.create_task``)."""
    return secrets.token_urlsafe(24)


def lost() -> dict[str, Any]:
    """The columns that fail a call whose worker died (the ``fail`` policy, or attempts exhausted)."""
    return durable.columns(InternalError(LOST_MESSAGE))


# What ``Served`` copies of the server's description as it was served.
DESCRIBED = ("server_id", "name", "title", "version", "instructions")


def served(server: ServerDescription, principal: Principal | None) -> tuple[Served, str] | None:
    """The server as a request was served it, and the agent's id: the ``server`` and ``agent_id`` of
    ``call_spec`` (``None`` when the description lacks the rows or the catalog revision: the worker then loads
    them with the record)."""
    if server.revision is None or server.pk is None or principal is None or principal.tenant_pk is None:
        return None
    catalog_version, created_at = server.revision
    described: dict[str, Any] = {name: getattr(server, name) for name in DESCRIBED}
    served = Served(
        pk=server.pk,
        tenant_pk=principal.tenant_pk,
        tenant_slug=principal.tenant,
        catalog_version=catalog_version,
        created_at=created_at,
        time_zone=principal.time_zone,
        **described,
    )
    return served, principal.agent_id


def call_spec(record: ToolTask, *, server: Served, agent_id: str) -> CallSpec:
    """What a worker needs to run the call of ``record`` besides its state, as it travels in the Celery message:
    what the record was created with, the server as the client was served it and the agent's id."""
    return CallSpec(
        task_id=record.task_id,
        tool_name=record.tool_name,
        arguments=record.arguments,
        protocol_version=record.protocol_version,
        client_capabilities=record.client_capabilities or {},
        deadline=record.deadline.timestamp() if record.deadline else timezone.now().timestamp(),
        input_responses=record.input_responses or None,
        request_state=record.request_state or None,
        agent_pk=record.agent_id,
        agent_id=agent_id,
        server=server,
    )


def unwritten(spec: CallSpec, row: Unwritten, celery_id: str) -> ToolTask:
    """The record (unsaved, ``queued``) of a call its serving process dispatched without writing it, as that
    process would have written it (``ToolTask.objects.worker_call``): from the message alone."""
    queued_at = datetime.fromtimestamp(row.queued_at, tz=UTC)
    record = ToolTask.objects.worker_call(
        task_id=spec.task_id,
        server_pk=spec.server.pk,
        agent_pk=spec.agent_pk,
        tool_name=spec.tool_name,
        arguments=spec.arguments,
        timeout=spec.deadline - row.queued_at,
        client_capabilities=spec.client_capabilities,
        protocol_version=spec.protocol_version,
        request_id=row.request_id,
        queued_at=queued_at,
        celery_id=celery_id,
        ttl_ms=row.ttl_ms,
    )
    record.deadline = datetime.fromtimestamp(spec.deadline, tz=UTC)
    return record
