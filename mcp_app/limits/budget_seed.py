"""Budget counters that start from the ledger (docs/budgets.md, "Budgets"): a budget created or changed in the
middle of a day or month counts what its tenant or agent had already spent in it.

When a ``Budget`` is saved, once its transaction commits, ``seed_budget`` sums the usage ledger (``UsageDay``) of
the budget's scope (the whole tenant, or its agent) over the tenant's current day and month
(``burndown.spent_so_far``: one query) and starts each counter of a metric and period the budget limits from that
sum, **only if the counter does not exist yet** (``budgets.seed``: Redis ``SET … NX EXAT``, the local backend the
same). A live counter already counts this period's calls since it was created and is never lowered; a new period
needs no seed (it starts from zero). The ledger trails the calls by one flush interval of the audit flusher, so a
seed can miss the last second of calls. It runs on the committing thread of the admin, the API or ``manage.py``,
never on an MCP request; a failure is logged and leaves the counters as they were.

Not here: counting calls (``budgets``), the ledger's writes (``ledger``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models.signals import post_save

from ..models import Budget
from . import budgets, burndown
from .periods import current

logger = logging.getLogger("mcp_app.limits.budgets")


def seed_budget(budget: Budget) -> list[budgets.Seed]:
    """Seed the counters of ``budget``'s limits in the current periods; returns the seeds offered."""
    limits = budget.limits()
    if not limits:
        return []
    tenant = budget.tenant
    now = budgets.clock()
    spent = burndown.spent_so_far(tenant, budget.agent_id, now)
    scope, owner = ("tenant", tenant.pk) if budget.agent_id is None else ("agent", budget.agent_id)
    period = current(tenant.time_zone, now)
    seeds = [
        budgets.Seed(budgets.counter_key(scope, owner, metric, period[name]), value, period[name].expire_at)
        for (metric, name) in limits
        if (value := spent.get((metric, name), 0.0)) > 0
    ]
    budgets.seed(seeds)
    return seeds


def _on_commit(budget_pk: int) -> None:
    try:
        budget = Budget.objects.select_related("tenant").filter(pk=budget_pk).first()
        if budget is not None:
            seed_budget(budget)
    except DatabaseError:
        logger.exception("budget %s: its counters could not be seeded from the ledger", budget_pk)


def _budget_saved(sender: Any, instance: Budget, raw: bool = False, **kwargs: Any) -> None:
    if not raw:
        transaction.on_commit(lambda: _on_commit(instance.pk), using=kwargs.get("using"))


post_save.connect(_budget_saved, sender=Budget, dispatch_uid="mcp-budget-seed")
