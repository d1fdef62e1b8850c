"""The whole tasks-extension suite of ``test_tasks.py`` again, with every tool bound with ``execution="worker"``
(on the embedded default: in-process worker calls). The same wire behaviour, and one row per task: the worker
call's record is the task."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mcp_app.models import ServerTool, ToolTask

from . import test_tasks

pytestmark = pytest.mark.usefixtures("_in_process_workers", "worker_calls_drained")


@pytest.fixture
def _in_process_workers(settings: Any) -> None:
    settings.MCP_APP = {**settings.MCP_APP, "WORKER_DISPATCH": "in_process"}


def _on_workers(access: Any) -> Any:
    ServerTool.objects.filter(server=access.server).update(execution="worker")
    return access


@pytest.fixture
def access(transactional_db: Any, access_factory: Callable[..., Any]) -> Any:
    return _on_workers(access_factory())


@pytest.fixture
def make_access(transactional_db: Any, access_factory: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    from channels.db import database_sync_to_async

    async def make(*args: Any, **kwargs: Any) -> Any:
        return await database_sync_to_async(lambda: _on_workers(access_factory(*args, **kwargs)))()

    return make


@pytest.fixture(autouse=True)
def _every_task_is_one_worker_row(transactional_db: Any) -> Any:
    yield
    rows = list(ToolTask.objects.values_list("execution", "client_task"))
    assert all(execution == "worker" for execution, _client in rows), rows


# Tests of what only inline tasks have: the inline-task cap (``INLINE_TASKS_PER_AGENT``) counts tasks run in the
# serving processes; worker calls are admitted by their own quotas instead (docs/limits.md, docs/quotas.md).
_INLINE_ONLY = {
    "test_an_agent_over_its_inline_task_cap_is_refused_and_its_call_stopped_while_another_tenant_is_served",
}

for _name in dir(test_tasks):
    if _name.startswith("test_") and _name not in _INLINE_ONLY:
        globals()[_name] = getattr(test_tasks, _name)
