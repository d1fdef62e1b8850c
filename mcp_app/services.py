"""The composition root: which implementation serves each port of the protocol core, built in one place.

- ``get_runner()``: the ``ToolRunner`` every request and task runs its calls with (``WorkerRunner``: tools bound
  with ``execution="worker"`` go to Celery workers, or run in this process without a broker, after admission
  against their quotas; the rest run inline).
- ``task_service(server_pk, agent_pk)``: the ``Tasks`` port of one stateless-era request, bound to that runner.
- ``cancel_task(task)``: cancel any durable record from synchronous code (the admin), worker calls included.
- ``handshake_task_service(...)``: the ``HandshakeTasks`` port (2025-11-25 tasks) of one handshake-era request.

Nothing else constructs a runner at module level. The transport and the admin's console ask here; tests may
``set_runner`` a fake and ``set_runner(None)`` to go back to the default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .protocol.context import ToolRunner

if TYPE_CHECKING:
    from .models import ToolTask
    from .runtime.handshake_tasks import HandshakeTaskService
    from .runtime.tasks import TaskService

_runner: ToolRunner | None = None


def get_runner() -> ToolRunner:
    """The process's tool runner (built on first use)."""
    global _runner
    if _runner is None:
        from .workers.runner import WorkerRunner

        _runner = WorkerRunner()
    return _runner


def set_runner(runner: ToolRunner | None) -> None:
    """Replace the process's runner (``None``: the default again)."""
    global _runner
    _runner = runner


def task_service(server_pk: int, agent_pk: int) -> TaskService:
    """The caller's durable tasks on one server, run with the process's runner."""
    from .runtime.tasks import TaskService

    return TaskService(server_pk, agent_pk, get_runner())


def handshake_task_service(server_pk: int, agent_pk: int, session_key: str | None) -> HandshakeTaskService:
    """The caller's 2025-11-25 tasks on one server (``session_key``: where their status notifications go)."""
    from .runtime.handshake_tasks import HandshakeTaskService

    return HandshakeTaskService(server_pk, agent_pk, session_key)


def cancel_task(task: ToolTask, message: str = "Cancelled by an administrator") -> bool:
    """Cancel a durable record (a task of either era, or a worker call) from synchronous code, wherever it runs:
    the admin's cancel action. Returns whether it moved (a terminal record stays as it is)."""
    from .runtime import durable
    from .workers import runner  # noqa: F401  (registers how a worker call is stopped: its Celery message revoked)

    return durable.cancel_now(task, message)
