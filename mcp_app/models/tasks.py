"""The table of every durable tool call (``ToolTask``): 2026-07-28 and 2025-11-25 tasks and worker calls. A record
is stored before the client hears of it, visible only to its server and agent; terminal states never change
(every transition is a conditional UPDATE). The manager holds the record's verbs; the lifecycle is
``runtime.durable``'s (docs/architecture.md, "Durable calls").
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, models, router, transaction
from django.db.models import F
from django.utils import timezone

from ..conf import mcp_settings
from ..protocol.errors import CapacityExceeded, InternalError
from ..protocol.versions import HANDSHAKE_VERSIONS
from . import statements
from .agents import Agent
from .servers import McpServer

TERMINAL = ("completed", "failed", "cancelled")
WORKER = "worker"  # ``execution`` of a call run by a Celery worker
# Inline tasks whose work is a coroutine of a serving process: running, or parked waiting for an approval.
IN_PROCESS = ("working", "parked")


class ToolTaskManager(models.Manager["ToolTask"]):
    def create_task(
        self,
        *,
        tool_name: str,
        arguments: dict[str, Any],
        ttl_ms: int,
        server: Any = None,
        agent: Any = None,
        server_id: int | None = None,
        agent_id: int | None = None,
        **state: Any,
    ) -> ToolTask:
        """A new task of an agent on a server (instances, or primary keys from cached snapshots). A ``working`` or
        ``parked`` inline task over ``INLINE_TASKS_PER_AGENT`` / ``_PER_TENANT`` is refused with
        ``CapacityExceeded``."""
        if state.get("status") in IN_PROCESS and state.get("execution", "inline") == "inline":
            self.check_inline_cap(agent.pk if agent is not None else agent_id)
        return self.create(
            task_id=secrets.token_urlsafe(24),
            # Instances when given (they stay loaded on the new row), else primary keys.
            **({"server": server} if server is not None else {"server_id": server_id}),
            **({"agent": agent} if agent is not None else {"agent_id": agent_id}),
            tool_name=tool_name,
            arguments=arguments,
            ttl_ms=ttl_ms,
            expires_at=timezone.now() + timedelta(milliseconds=ttl_ms),
            **state,
        )

    def check_inline_cap(self, agent_pk: Any) -> None:
        """Raise ``CapacityExceeded`` if the agent or its tenant runs as many inline tasks as it may (one query
        per cap that is set, on the cold path that creates a task row anyway). A call parked for approval counts:
        it waits in its process as a running one does."""
        running = self.filter(
            status__in=IN_PROCESS, execution="inline", client_task=True, expires_at__gt=timezone.now()
        )
        tenant = Agent.objects.filter(pk=agent_pk).values("tenant_id")[:1]
        for scope, rows, limit in (
            ("agent", running.filter(agent_id=agent_pk), mcp_settings.INLINE_TASKS_PER_AGENT),
            ("tenant", running.filter(agent__tenant_id=models.Subquery(tenant)), mcp_settings.INLINE_TASKS_PER_TENANT),
        ):
            if limit > 0 and rows.count() >= limit:
                raise CapacityExceeded("inline tasks", scope, int(limit))

    def visible_to(self, task_id: str, *, server_id: int, agent_id: int) -> ToolTask | None:
        """The caller's own, unexpired task, or ``None`` (authorization is checked on every call)."""
        return self.filter(
            task_id=task_id, server_id=server_id, agent_id=agent_id, expires_at__gt=timezone.now()
        ).first()

    def insert(self, **fields: Any) -> ToolTask:
        """A new row in one composed-once INSERT (``statements.insert``; no save signals: none are connected to
        this model), as the worker-call verbs write theirs (``create_worker_call``, ``take_unwritten``)."""
        task = self.model(**fields)
        statements.insert(task, using=router.db_for_write(self.model))
        return task

    def transition(
        self, pk: int, *, where: dict[str, Any] | None = None, increment: tuple[str, ...] = (), **fields: Any
    ) -> bool:
        """Move a task not terminal yet whose columns match ``where`` (``fields`` set, ``increment`` columns + 1) in
        one conditional UPDATE (``statements.update``); returns whether it moved."""
        fields["updated_at"] = timezone.now()
        moved = statements.update(
            self.model,
            pk,
            fields,
            equal=where,
            not_in={"status": TERMINAL},
            increment=increment,
            using=router.db_for_write(self.model),
        )
        return bool(moved)

    def cancel(self, pk: int, message: str = "Cancelled by the client") -> bool:
        """Mark a task ``cancelled`` unless it is terminal; returns whether it moved. Stopping its work is the
        runtime's (``runtime.durable.cancel``, which calls this)."""
        return self.transition(
            pk, status=ToolTask.Status.CANCELLED, status_message=message[:500], finished_at=timezone.now()
        )

    def fail_orphaned(self, is_dead: Callable[[str], bool]) -> int:
        """Fail the ``working`` tasks whose owning process died (``is_dead(owner)``): their work is gone, and
        without this they would stay ``working`` until their TTL. Parked (``input_required``) tasks of the 2026
        extension need no process and are left alone. Returns how many were failed."""
        # A 2025-11-25 task waiting for input waits inside its process (the client's answer resumes that
        # coroutine), so it dies with the process too.
        # So does a call parked for approval: its wait for the decision is a coroutine of that process.
        in_process = (
            models.Q(status=ToolTask.Status.WORKING)
            | models.Q(status=ToolTask.Status.PARKED)
            | models.Q(status=ToolTask.Status.INPUT_REQUIRED, protocol_version__in=HANDSHAKE_VERSIONS)
        )
        # A worker call is its worker's (re-queued or failed there, or reaped past its deadline).
        candidates = self.filter(in_process).exclude(owner="").exclude(execution=WORKER)
        orphans = [pk for pk, owner in candidates.values_list("pk", "owner") if is_dead(owner)]
        if not orphans:
            return 0
        message = "The process running this task stopped before it finished; run the call again."
        return self.filter(in_process, pk__in=orphans).update(
            status=ToolTask.Status.FAILED,
            error=InternalError(message).to_wire(),
            status_message=message[:500],
            updated_at=timezone.now(),
        )

    def record_progress(self, pk: int, progress: float, total: float | None, message: str | None) -> bool:
        """Keep a running call's latest progress (for the admin); a finished task is left as it ended."""
        moved = (
            self.filter(pk=pk)
            .exclude(status__in=TERMINAL)
            .update(**ToolTask.progress_columns(progress, total, message))
        )
        return bool(moved)

    # The verbs of worker calls (``execution="worker"``); sync: called from worker threads and the Celery task.

    def worker_call(
        self,
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
        queued_at: datetime | None = None,
        celery_id: str | None = None,
        ttl_ms: int | None = None,
    ) -> ToolTask:
        """A new ``queued`` record of a worker call, not written yet (``create_worker_call`` writes it; a worker
        writes a call that only its dispatching process awaits, ``take_unwritten``, from what its message carries:
        ``queued_at``, ``celery_id``, ``ttl_ms``). A plain worker call is kept (for re-attachment) the longer of
        the key's TTL and the task TTL after its deadline."""
        now = queued_at or timezone.now()
        keep = max(float(mcp_settings.IDEMPOTENCY_TTL_SECONDS), mcp_settings.TASK_TTL_MS / 1000.0)
        if ttl_ms is None:
            ttl_ms = int(mcp_settings.TASK_TTL_MS) if client_task else int((timeout + keep) * 1000)
        return self.model(
            task_id=task_id,
            ttl_ms=ttl_ms,
            created_at=now,
            updated_at=now,
            expires_at=now + timedelta(milliseconds=ttl_ms),
            server_id=server_pk,
            agent_id=agent_pk,
            tool_name=tool_name,
            arguments=arguments,
            status=ToolTask.Status.QUEUED,
            execution=WORKER,
            client_task=client_task,
            protocol_version=protocol_version,
            request_id="" if request_id is None else str(request_id)[:200],
            idempotency_key=idempotency_key,
            celery_id=celery_id or str(uuid.uuid4()),
            deadline=now + timedelta(seconds=timeout),
            client_capabilities=client_capabilities,
        )

    def create_worker_call(self, **fields: Any) -> tuple[ToolTask, bool]:
        """A new ``queued`` record (``worker_call(**fields)``, written), or (with an idempotency key already used
        by this agent on this server within the TTL) the existing one: ``(record, created)``. Race-safe: the
        unique constraint decides."""
        record = self.worker_call(**fields)
        if not record.idempotency_key:
            statements.insert(record, using=router.db_for_write(self.model))
            return record, True
        server_pk, agent_pk, key = record.server_id, record.agent_id, record.idempotency_key
        for _attempt in range(3):
            existing = self.filter(server_id=server_pk, agent_id=agent_pk, idempotency_key=key)
            found = existing.first()
            if found is not None:
                horizon = found.created_at + timedelta(seconds=float(mcp_settings.IDEMPOTENCY_TTL_SECONDS))
                if horizon > record.created_at and found.tool_name == record.tool_name:
                    return found, False
                # Past its TTL (or for another tool): the key is free again; the old record keeps its history.
                existing.filter(pk=found.pk).update(idempotency_key="")
            try:
                with transaction.atomic():
                    statements.insert(record, using=router.db_for_write(self.model))
                    return record, True
            except IntegrityError:
                record.pk = None
                continue  # another request created it first: attach to that one
        raise InternalError("Could not record the call (idempotency key contention); retry")

    def take_unwritten(self, record: ToolTask, owner: str) -> bool:
        """A worker takes a call whose record was never written (``worker_call``, as its message carries it): the
        record written ``working``, in one INSERT unless a row of its task id exists (a tombstone left by a
        cancellation or by the dispatcher's queue timeout, or this message's earlier delivery); whether it was
        (then ``record`` has its primary key; else ``untaken`` on the existing row tells why)."""
        now = timezone.now()
        record.status, record.attempts, record.started_at, record.owner, record.updated_at = (
            ToolTask.Status.WORKING,
            1,
            now,
            owner,
            now,
        )
        return statements.insert(record, using=router.db_for_write(self.model), unless="task_id")

    def tombstone(self, record: ToolTask, columns: dict[str, Any]) -> bool:
        """Settle a call whose record may not be written yet: ``record`` (unsaved, ``worker_call``) written with
        the outcome's ``columns`` unless a row of its task id exists (a worker took it first; that row is left as
        it is); whether the tombstone was written. A worker that takes the call later finds it and skips."""
        now = timezone.now()
        stone = self.model(
            **{field.attname: getattr(record, field.attname) for field in self.model._meta.concrete_fields}
        )
        stone.pk = None
        for name, value in {"finished_at": now, **columns, "updated_at": now}.items():
            setattr(stone, name, value)
        return statements.insert(stone, using=router.db_for_write(self.model), unless="task_id")

    def cancel_unwritten(self, record: ToolTask, message: str = "Cancelled by the client") -> bool:
        """``cancel`` of a call dispatched without its record (``worker_call``, unsaved): the row a worker wrote
        cancelled (one UPDATE by task id: the usual case, a call cancelled while it runs), else a ``cancelled``
        tombstone, which the worker's ``take_unwritten`` then finds (or, when a worker wrote its row in between,
        that row cancelled); whether either moved."""
        cancelled = {"status": ToolTask.Status.CANCELLED, "status_message": message[:500]}

        def cancel_row() -> bool:
            now = timezone.now()
            running = self.filter(task_id=record.task_id).exclude(status__in=TERMINAL)
            return bool(running.update(**cancelled, finished_at=now, updated_at=now))

        return cancel_row() or self.tombstone(record, cancelled) or cancel_row()

    def pk_of(self, task_id: str) -> int | None:
        pk: int | None = self.filter(task_id=task_id).values_list("pk", flat=True).first()
        return pk

    def by_task_id(self, task_id: str) -> ToolTask | None:
        return self.filter(task_id=task_id).first()

    def requeue(self, task_id: str, *, timeout: float) -> ToolTask | None:
        """An existing record (a task resumed by ``tasks/update``) dispatched again: ``queued`` with a new Celery
        id, attempts reset. ``None`` when it is terminal."""
        record = self.filter(task_id=task_id).first()
        if record is None:
            return None
        moved = self.transition(
            record.pk,
            status=ToolTask.Status.QUEUED,
            execution=WORKER,
            celery_id=str(uuid.uuid4()),
            attempts=0,
            deadline=timezone.now() + timedelta(seconds=timeout),
            finished_at=None,
        )
        return self.filter(pk=record.pk).first() if moved else None

    def take(self, pk: int, celery_id: str, owner: str) -> bool:
        """A worker takes a ``queued`` record dispatched as ``celery_id``: one conditional UPDATE; ``False`` when
        it did not move (then ``untaken`` tells why, and handles redeliveries)."""
        return self.transition(
            pk,
            where={"celery_id": celery_id, "status": ToolTask.Status.QUEUED},
            increment=("attempts",),
            status=ToolTask.Status.WORKING,
            started_at=timezone.now(),
            owner=owner,
        )

    def begin(
        self, pk: int, celery_id: str, owner: str, *, lost: Callable[[], dict[str, Any]]
    ) -> tuple[ToolTask | None, str]:
        """A worker takes the record: ``(record, "run")`` to run it, with its agent, server and tenant loaded
        (for a message that does not carry the call), else ``(record or None, why)`` as ``untaken`` says."""
        if self.take(pk, celery_id, owner):
            return self._with_relations(pk), "run"
        return self.untaken(pk, celery_id, owner, lost=lost)

    def untaken(
        self, pk: int, celery_id: str, owner: str, *, lost: Callable[[], dict[str, Any]]
    ) -> tuple[ToolTask | None, str]:
        """Why ``take`` moved nothing, after one more read: terminal already, superseded by a newer dispatch, or
        ``working`` already (this message was delivered before, to a worker that died mid-call: run it again,
        or, past the loss policy, settle the record with the columns ``lost()`` gives and say ``"lost"``)."""
        record = self.filter(pk=pk).first()
        if record is None:
            return None, "gone"
        if record.status in TERMINAL or record.status == ToolTask.Status.INPUT_REQUIRED:
            return record, "terminal"
        if record.celery_id and record.celery_id != celery_id:
            return record, "superseded"
        if record.status == ToolTask.Status.WORKING and (
            mcp_settings.WORKER_LOST_CALLS != "requeue" or record.attempts >= mcp_settings.WORKER_CALL_MAX_ATTEMPTS
        ):
            self.store(pk, lost())
            return self.filter(pk=pk).first(), "lost"
        now = timezone.now()
        moved = self.filter(
            pk=pk, celery_id=celery_id, status__in=(ToolTask.Status.QUEUED, ToolTask.Status.WORKING)
        ).update(
            status=ToolTask.Status.WORKING, attempts=F("attempts") + 1, started_at=now, updated_at=now, owner=owner
        )
        return self._with_relations(pk), "run" if moved else "terminal"

    def _with_relations(self, pk: int) -> ToolTask | None:
        return self.select_related("agent", "server", "server__tenant").filter(pk=pk).first()

    def store(
        self, pk: int, columns: dict[str, Any], *, celery_id: str | None = None, where: dict[str, Any] | None = None
    ) -> bool:
        """Settle a record with an outcome's ``columns`` (``runtime.durable.columns``); returns whether it moved
        (a cancelled or otherwise terminal record keeps its state; ``celery_id`` and ``where``: only a record
        whose columns still say so)."""
        condition = {**(where or {}), **({"celery_id": celery_id} if celery_id is not None else {})}
        return self.transition(pk, where=condition or None, **columns)

    def load(self, pk: int) -> ToolTask | None:
        return self.filter(pk=pk).first()

    def become_task(self, pk: int) -> ToolTask:
        """The client now knows this worker call as a task: it lives for TASK_TTL_MS from now."""
        ttl = mcp_settings.TASK_TTL_MS
        self.filter(pk=pk).update(client_task=True, ttl_ms=ttl, expires_at=timezone.now() + timedelta(milliseconds=ttl))
        return self.get(pk=pk)

    def delete_expired(self) -> int:
        count, _ = self.filter(expires_at__lte=timezone.now()).delete()
        return count


class ToolTask(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        # Waiting for a tenant admin's approval (models.approvals); the protocol knows it as working.
        PARKED = "parked", "Waiting for approval"
        WORKING = "working", "Working"
        INPUT_REQUIRED = "input_required", "Input required"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    task_id = models.CharField("task id", max_length=64, unique=True, editable=False)
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tasks", verbose_name="server")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tasks", verbose_name="agent")
    tool_name = models.CharField("tool", max_length=128)
    arguments = models.JSONField("arguments", default=dict)
    status = models.CharField("status", max_length=16, choices=Status.choices, default=Status.WORKING)
    status_message = models.CharField("status message", max_length=500, blank=True)
    result = models.JSONField("result", null=True, blank=True)
    error = models.JSONField("error", null=True, blank=True)
    input_requests = models.JSONField("outstanding input requests", null=True, blank=True)
    input_responses = models.JSONField("input responses so far", default=dict, blank=True)
    request_state = models.TextField("signed request state", blank=True)
    client_capabilities = models.JSONField("client capabilities", default=dict, blank=True)
    ttl_ms = models.PositiveIntegerField("time to live (ms)")
    created_at = models.DateTimeField("created", default=timezone.now)
    updated_at = models.DateTimeField("last updated", default=timezone.now)
    expires_at = models.DateTimeField("expires")
    owner = models.CharField(
        "owning process",
        max_length=128,
        blank=True,
        help_text="The process running the task's work (host:pid:boot); failed at start-up if it died.",
    )
    execution = models.CharField(
        "execution", max_length=8, default="inline", help_text="inline (the serving process) or worker (Celery)."
    )
    client_task = models.BooleanField(
        "a task for the client",
        default=True,
        help_text="The client knows this call as a task (tasks/get); else it is a worker call's durable record.",
    )
    protocol_version = models.CharField("protocol version", max_length=16, blank=True)
    request_id = models.CharField("JSON-RPC request id", max_length=200, blank=True)
    idempotency_key = models.CharField(
        "idempotency key", max_length=200, blank=True, help_text="The client's key (in _meta) for re-issued calls."
    )
    celery_id = models.CharField("Celery task id", max_length=64, blank=True)
    attempts = models.PositiveSmallIntegerField("attempts", default=0)
    started_at = models.DateTimeField("started", null=True, blank=True)
    finished_at = models.DateTimeField("finished", null=True, blank=True)
    deadline = models.DateTimeField("deadline", null=True, blank=True, help_text="Failed by the reaper past it.")
    # The last progress the tool reported (ctx.report_progress), for the admin's view of running calls; written at
    # most about once a second per call (``mcp_app.runtime.progress``), whether or not the client asked for it.
    progress = models.FloatField("progress", null=True, blank=True)
    progress_total = models.FloatField("progress total", null=True, blank=True)
    progress_message = models.CharField("progress message", max_length=500, blank=True)

    objects = ToolTaskManager()

    class Meta:
        verbose_name = "tool task"
        verbose_name_plural = "tool tasks"
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=("expires_at",), name="mcp_task_expires"),
            models.Index(fields=("status", "deadline"), name="mcp_task_deadline"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=("agent", "server", "idempotency_key"),
                condition=~models.Q(idempotency_key=""),
                name="mcp_task_idempotency_unique",
            )
        ]

    @staticmethod
    def progress_columns(progress: float, total: float | None, message: str | None) -> dict[str, Any]:
        return {"progress": progress, "progress_total": total, "progress_message": (message or "")[:500]}

    def __str__(self) -> str:
        return f"{self.tool_name} task {self.task_id[:8]}… ({self.status})"

    @property
    def progress_percent(self) -> int | None:
        """The reported progress as a whole percentage of its total (``None`` without a total)."""
        if self.progress is None or not self.progress_total:
            return None
        return max(0, min(100, round(100 * self.progress / self.progress_total)))

    @property
    def elapsed_seconds(self) -> float:
        """Seconds since the call started (or was created), up to its end when it finished."""
        start = self.started_at or self.created_at
        end = self.finished_at or timezone.now()
        return max(0.0, (end - start).total_seconds())

    @property
    def elapsed_text(self) -> str:
        """``elapsed_seconds`` for people: ``42 s``, ``3 min 05 s``, ``2 h 01 min``."""
        seconds = int(self.elapsed_seconds)
        if seconds < 60:
            return f"{seconds} s"
        minutes, seconds = divmod(seconds, 60)
        if minutes < 60:
            return f"{minutes} min {seconds:02d} s"
        hours, minutes = divmod(minutes, 60)
        return f"{hours} h {minutes:02d} min"
