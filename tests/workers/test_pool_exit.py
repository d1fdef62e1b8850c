"""A prefork pool process writes what its calls spent when Celery says it exits (``worker_process_shutdown``, sent
in the pool process): billiard ends it with ``os._exit``, so no ``atexit`` handler of it runs, and its usage would
otherwise wait on its flusher threads racing billiard's last second (tests/e2e/test_usage_worker_loss.py shows
the whole stop on a real worker)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from celery.signals import worker_process_shutdown
from channels.db import database_sync_to_async

import mcp_app.workers.running.tasks  # noqa: F401  (connects the worker's signals)
from mcp_app.limits import budget_alerts, budgets, usage
from mcp_app.limits.budget_meter import meter
from mcp_app.limits.ledger import ledger
from mcp_app.models import Budget, UsageDay
from mcp_app.protocol.errors import BudgetExceeded
from tests.helpers import close_connections_of_async_threads  # noqa: F401  (same clean-up here)


@pytest.fixture
def own_counters(settings: Any, transactional_db: None, use_backend: Any) -> Any:
    """Budget counters of this test only (primary keys are reused between tests), and no spending of earlier
    tests left in the meter (their tenants are gone: flushing drops it)."""
    meter.flush()
    if settings.REDIS_URL:
        return use_backend("BUDGETS", budgets.RedisBudgets(settings.REDIS_URL, f"mcp:test:{uuid.uuid4().hex}"))
    return use_backend("BUDGETS", budgets.LocalBudgets())


async def test_a_pool_process_writes_its_ledger_rows_and_budget_seconds_as_it_exits(
    transactional_db: None, access_factory: Any, own_counters: Any
) -> None:
    access = await database_sync_to_async(access_factory)(tools=("echo",))
    await database_sync_to_async(Budget.objects.create)(
        tenant=access.tenant, set_by="operator", tool_seconds_per_day=1.0
    )
    usage.spent(
        usage.Spent(
            tenant_pk=access.tenant.pk, agent_pk=access.agent.pk, server_pk=access.server.pk,
            agent_key=access.agent.agent_id, server_key=access.server.server_id, tool_name="echo",
            day=datetime.now(UTC).date(), errors=0, tool_seconds=1.5, bytes_in=10, bytes_out=10, cost=Decimal(0),
        )
    )  # fmt: skip
    assert ledger.pending() == 1

    await database_sync_to_async(worker_process_shutdown.send)(sender="test", pid=os.getpid(), exitcode=0)

    assert ledger.pending() == 0
    row = await database_sync_to_async(UsageDay.objects.get)(tenant=access.tenant, tool_name="echo")
    assert (row.calls, row.tool_seconds) == (1, 1.5)
    assert meter.flush() == 0  # nothing left buffered: the seconds reached the counter
    limits = await database_sync_to_async(Budget.objects.limits_for)(access.tenant.pk, access.agent.pk)
    token = SimpleNamespace(budgets=limits, tenant_pk=access.tenant.pk, agent_pk=access.agent.pk, time_zone="UTC")
    with pytest.raises(BudgetExceeded) as refused:
        await budgets.take(token, (), 1)
    assert refused.value.data["metric"] == "tool_seconds" and refused.value.data["used"] == pytest.approx(1.5)
    assert budget_alerts.alerts.wait_idle(10.0)  # the 80% alert the seconds crossed, recorded off the test
