"""The tool-seconds and cost of ended calls, on their way to the budget counters (docs/budgets.md).

``record`` listens to ``usage.spent``: it adds a call's tool-seconds and cost to this process's buffer (constant
time, no I/O) per tenant, agent and day. A daemon thread (``mcp-budget-meter``) flushes the buffer every
``BUDGET_FLUSH_INTERVAL_SECONDS``: it reads the budgets that apply (one query per tenant and agent in the buffer,
off the request path) and adds each amount to the counters of those budgets (``budgets.add``: one round trip
per tenant and agent), which also says which alert thresholds were crossed. A call's spending therefore refuses
later calls within one interval, so a budget can be passed by what the calls in flight spend plus one interval
of calls. Amounts of a tenant with no tool-seconds or cost budget are dropped.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
from collections import defaultdict
from datetime import date

from django.db import DatabaseError, connections

from ..conf import pace
from ..models import Budget, Tenant
from . import budgets, usage
from .periods import period_of_day

logger = logging.getLogger("mcp_app.limits.budgets")

Key = tuple[int, int | None, date]  # tenant, agent, the tenant's day


class Meter:
    """The per-process buffer and its flusher thread."""

    def __init__(self) -> None:
        self._pending: defaultdict[Key, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._start_lock = threading.Lock()  # never held across I/O: a call's end may wait on it once
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def record(self, spent: usage.Spent) -> None:
        """Buffer what one call spent (the listener of ``usage.spent``)."""
        if not spent.tool_seconds and not spent.cost:
            return
        with self._lock:
            amounts = self._pending[(spent.tenant_pk, spent.agent_pk, spent.day)]
            amounts[0] += spent.tool_seconds
            amounts[1] += float(spent.cost)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="mcp-budget-meter", daemon=True)
                self._thread.start()
                atexit.register(self.stop)

    def after_fork(self) -> None:
        """A forked child (Celery's prefork pool, where worker calls end) has no flusher thread: it starts its own
        on its first call's spending. What the parent had buffered is the parent's to add."""
        self._pending = defaultdict(lambda: [0.0, 0.0])
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._start_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def clear(self) -> None:
        """Drop what is buffered (tests: nothing one test spent reaches another's counters)."""
        with self._lock:
            self._pending.clear()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(pace("BUDGET_FLUSH_INTERVAL_SECONDS", 1.0)):
            try:
                if self.flush():
                    connections.close_all()  # none held while nothing is spent
            except Exception:
                logger.exception("tool-seconds and cost could not reach the budget counters")

    def flush(self) -> int:
        """Add what is buffered to the counters now; returns how many tenant-agent-days it took (0: nothing was
        buffered, no query made)."""
        with self._flushing:
            with self._lock:
                pending, self._pending = self._pending, defaultdict(lambda: [0.0, 0.0])
            if not pending:
                return 0
            try:
                zones = dict(Tenant.objects.filter(pk__in={key[0] for key in pending}).values_list("pk", "time_zone"))
                limits = {pair: Budget.objects.limits_for(*pair) for pair in {key[:2] for key in pending}}
            except DatabaseError:
                logger.exception("budgets could not be read: %s tenant-agent-days of spending dropped", len(pending))
                return len(pending)
            for (tenant_pk, agent_pk, day), (seconds, cost) in pending.items():
                zone = zones.get(tenant_pk)
                if zone is None:
                    continue
                build = budgets.plan(
                    limits[(tenant_pk, agent_pk)],
                    tenant_pk,
                    agent_pk,
                    {"tool_seconds": seconds, "cost": cost},
                    {"tool_seconds": budgets.ADD, "cost": budgets.ADD},
                )
                counters, thresholds = build(functools.partial(period_of_day, time_zone=zone, day=day))
                budgets.add(counters, thresholds)
            return len(pending)


meter = Meter()
usage.on_spent(meter.record)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=meter.after_fork)
