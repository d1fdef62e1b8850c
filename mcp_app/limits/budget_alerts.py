"""Budget alerts (docs/budgets.md, "Alerts"): a counter that reached a budget's ``alert_percent`` in a period, told
once, off the request path.

``announce(Crossing(...))`` only queues (no I/O: it may be called while a request is admitted) on the alert thread
(``alert_hooks.worker``), which then records the ``BudgetAlert`` row, whose unique constraint makes an alert once
per budget, metric, period and threshold across the fleet (the process that loses the race does nothing more); logs
it on ``mcp_app.audit``; counts it (``mcp_budget_alerts_total{metric,period}``); and sends it (``"type":
"budget.alert"``) to the tenant's alert webhook (``alert_hooks.send``: signed, SSRF-guarded, retried). The outcome
is stored on the row (``delivered_at``, ``delivery_error``).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import date, datetime

from django.db import IntegrityError
from django.utils import timezone

from .. import alert_hooks
from ..models import Agent, BudgetAlert, Tenant
from ..observability import metrics
from ..protocol.errors import json_number

logger = logging.getLogger("mcp_app.audit")


@dataclass(frozen=True, slots=True)
class Crossing:
    """A threshold of one budget crossed: who, which counter, and its value then."""

    tenant_pk: int
    agent_pk: int | None  # the agent of an agent budget
    scope: str
    budget_pk: int
    metric: str
    period: str
    period_start: date
    resets_at: datetime
    percent: int
    used: float
    limit: float


class Alerts:
    """Budget alert work on the alert thread."""

    def announce(self, crossing: Crossing) -> None:
        """Queue ``crossing`` (constant time, no I/O)."""
        alert_hooks.worker.schedule(0.0, functools.partial(self._record, crossing))

    def wait_idle(self, timeout: float) -> bool:
        """For tests: wait (bounded) until nothing is queued or running."""
        return alert_hooks.worker.wait_idle(timeout)

    def _record(self, crossing: Crossing) -> None:
        try:
            alert, created = BudgetAlert.objects.get_or_create(
                budget_id=crossing.budget_pk,
                metric=crossing.metric,
                period=crossing.period,
                period_start=crossing.period_start,
                percent=crossing.percent,
                defaults={"tenant_id": crossing.tenant_pk, "used": crossing.used, "limit": crossing.limit},
            )
        except IntegrityError:  # another process recorded it first, or the budget is gone
            return
        if not created:
            return
        tenant = Tenant.objects.filter(pk=crossing.tenant_pk).values_list("slug", flat=True).first()
        agent = None
        if crossing.agent_pk is not None:
            agent = Agent.objects.filter(pk=crossing.agent_pk).values_list("agent_id", flat=True).first()
        payload = {
            "type": "budget.alert",
            "tenant": tenant,
            "scope": crossing.scope,
            "agent": agent,
            "metric": crossing.metric,
            "period": crossing.period,
            "percent": crossing.percent,
            "used": json_number(crossing.used),
            "budget": json_number(crossing.limit),
            "periodStart": crossing.period_start.isoformat(),
            "resetsAt": crossing.resets_at.isoformat().replace("+00:00", "Z"),
        }
        logger.info(
            "budget alert: tenant %s, %s%s, %s per %s reached %s%% (%s of %s)",
            tenant, crossing.scope, f" {agent}" if agent else "", crossing.metric, crossing.period,
            crossing.percent, payload["used"], payload["budget"],
        )  # fmt: skip
        metrics.budget_alerted(crossing.metric, crossing.period)
        alert_hooks.send(crossing.tenant_pk, payload, functools.partial(_store_outcome, alert.pk))


def _store_outcome(alert_pk: int, attempt: int, error: str | None) -> None:
    if error is None:
        BudgetAlert.objects.filter(pk=alert_pk).update(delivered_at=timezone.now(), delivery_error="")
    else:
        BudgetAlert.objects.filter(pk=alert_pk).update(delivery_error=f"attempt {attempt}: {error}"[:500])


alerts = Alerts()


def announce(crossing: Crossing) -> None:
    """Queue ``crossing`` for this process's alert thread (see the module docstring)."""
    alerts.announce(crossing)
