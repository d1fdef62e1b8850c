"""Budget alerts (docs/budgets.md, "Alerts"): a counter that reached a budget's ``alert_percent`` in a period, told
once, off the request path.

``announce(Crossing(...))`` only queues (no I/O: it may be called while a request is admitted). A daemon thread
(``mcp-budget-alerts``) then records the ``BudgetAlert`` row, whose unique constraint makes an alert once per
budget, metric, period and threshold across the fleet (the process that loses the race does nothing more); logs
it on ``mcp_app.audit``; counts it (``mcp_budget_alerts_total{metric,period}``); and POSTs it to the tenant's
active ``BudgetAlertHook``, signed (``X-MCP-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">``) and
SSRF-guarded (``outbound.webhook_transport("budget_alert")``), retried ``BUDGET_ALERT_ATTEMPTS`` times 1 s, 2 s,
4 s… apart. The outcome is stored on the row (``delivered_at``, ``delivery_error``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import heapq
import hmac
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime

import httpx
from django.db import DatabaseError, IntegrityError, connections
from django.utils import timezone

from ..conf import mcp_settings
from ..models import Agent, BudgetAlert, BudgetAlertHook, Tenant
from ..observability import metrics
from ..outbound import webhook_transport
from ..protocol.errors import json_number

logger = logging.getLogger("mcp_app.audit")
SIGNATURE_HEADER = "X-MCP-Signature"


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


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-MCP-Signature`` value of ``body`` sent at ``timestamp`` (see the module docstring)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class Alerts:
    """The queue of alert work (records and deliveries, each due at a time) and its thread."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None

    def after_fork(self) -> None:
        """A forked child has no alert thread: it starts its own with its first crossing; the parent's queue
        stays the parent's."""
        self._due = []
        self._cond = threading.Condition()
        self._busy = False
        self._thread = None

    def announce(self, crossing: Crossing) -> None:
        """Queue ``crossing`` (constant time, no I/O, never raises)."""
        self._schedule(0.0, functools.partial(self._record, crossing))

    def wait_idle(self, timeout: float) -> bool:
        """For tests: wait (bounded) until nothing is queued or running."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._due or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _schedule(self, delay: float, job: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), job))
            self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mcp-budget-alerts", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._cond.wait(None if not self._due else self._due[0][0] - time.monotonic())
                job = heapq.heappop(self._due)[2]
                self._busy = True
            try:
                job()
            except Exception:
                logger.exception("a budget alert could not be handled")
            finally:
                connections.close_all()  # alerts are rare: no connection held between them
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

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
        hook = BudgetAlertHook.objects.filter(tenant_id=crossing.tenant_pk, is_active=True).first()
        if hook is not None:
            body = json.dumps(payload, separators=(",", ":")).encode()
            self._deliver(alert.pk, hook.url, hook.signing_secret(), body, 1)

    def _deliver(self, alert_pk: int, url: str, secret: str, body: bytes, attempt: int) -> None:
        error = asyncio.run(_post(url, secret, body))
        try:
            if error is None:
                BudgetAlert.objects.filter(pk=alert_pk).update(delivered_at=timezone.now(), delivery_error="")
                return
            BudgetAlert.objects.filter(pk=alert_pk).update(delivery_error=f"attempt {attempt}: {error}"[:500])
        except DatabaseError:
            logger.exception("the outcome of a budget alert's delivery could not be stored")
        if attempt < mcp_settings.BUDGET_ALERT_ATTEMPTS:
            retry = functools.partial(self._deliver, alert_pk, url, secret, body, attempt + 1)
            self._schedule(float(2 ** (attempt - 1)), retry)
        else:
            logger.warning("budget alert %s not delivered after %s attempts: %s", alert_pk, attempt, error)


async def _post(url: str, secret: str, body: bytes) -> str | None:
    """POST one alert; ``None`` when answered 2xx, else what went wrong (no secret in it)."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "mcp-host budget alerts",
        SIGNATURE_HEADER: sign(secret, int(time.time()), body),
    }
    try:
        async with httpx.AsyncClient(
            transport=webhook_transport("budget_alert"),
            timeout=float(mcp_settings.BUDGET_ALERT_TIMEOUT_SECONDS),
            follow_redirects=False,
        ) as client:
            answer = await client.post(url, content=body, headers=headers)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if 200 <= answer.status_code < 300 else f"HTTP {answer.status_code}"


alerts = Alerts()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=alerts.after_fork)


def announce(crossing: Crossing) -> None:
    """Queue ``crossing`` for this process's alert thread (see the module docstring)."""
    alerts.announce(crossing)
