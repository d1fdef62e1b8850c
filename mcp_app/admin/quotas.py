"""What the admin shows of worker-call quotas: how many worker calls of a tenant or agent run now, against its
effective limit (``mcp_app.limits.quotas``). Counts come from the quota backend, once per changelist page
(``QuotaChangeList``) or change page; "unknown" when the backend cannot be read.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest

from ..conf import mcp_settings
from ..limits import quotas

logger = logging.getLogger("mcp_app.admin")

TENANT = "tenant"
AGENT = "agent"
_ATTRIBUTE = "_mcp_running_worker_calls"
_DEFAULTS = {TENANT: "WORKER_CALLS_PER_TENANT", AGENT: "WORKER_CALLS_PER_AGENT"}


def annotate(objects: Any, scope: str) -> None:
    """Fetch the running counts of ``objects`` in one round trip and attach them (``None``: unknown)."""
    rows = list(objects)
    pks = [row.pk for row in rows]
    try:
        tenants, agents = quotas.running_calls(**{f"{scope}s": pks})
        counts: dict[int, int] | None = tenants if scope == TENANT else agents
    except Exception as error:  # the backend is down: the page still renders
        logger.warning("could not read running worker calls: %s: %s", type(error).__name__, error)
        counts = None
    for row in rows:
        setattr(row, _ATTRIBUTE, None if counts is None else counts.get(row.pk, 0))


def describe(obj: Any, scope: str) -> str:
    """``"2 of 5"``, ``"0 (unlimited)"`` or ``"unknown of 5"``: running now against the effective limit."""
    if obj is None or obj.pk is None:
        return "-"
    if not hasattr(obj, _ATTRIBUTE):
        annotate([obj], scope)
    running = getattr(obj, _ATTRIBUTE)
    shown = "unknown" if running is None else str(running)
    limit = quotas.effective(obj.max_worker_calls, getattr(mcp_settings, _DEFAULTS[scope]))  # its own, else the setting
    return f"{shown} (unlimited)" if limit == 0 else f"{shown} of {limit}"


class RunningWorkerCalls:
    """Mixin for the tenant's and the agent's ModelAdmins: the ``running_worker_calls`` column and field of
    ``quota_scope`` (one round trip per changelist page), after ``edited_fields`` on the form."""

    quota_scope: str
    edited_fields: tuple[str, ...]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        running = ("running_worker_calls",) if obj is not None else ()
        return (*self.edited_fields, *running, "created_at")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        scope = self.quota_scope

        class QuotaChangeList(ChangeList):
            def get_results(self, request: HttpRequest) -> None:
                super().get_results(request)
                annotate(self.result_list, scope)

        return QuotaChangeList

    @admin.display(description="worker calls running")
    def running_worker_calls(self, obj: Any) -> str:
        return describe(obj, self.quota_scope)
