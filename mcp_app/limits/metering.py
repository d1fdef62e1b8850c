"""Metering: what one tool call spent, measured where its tool ran (docs/budgets.md, "The usage ledger").

``METER`` is the ``UsageMeter`` port every request context carries (``services.request_context``, a worker call's
``call_context``); the inline runner tells it each call it ran, once, when the call ended. It turns the call into a
``usage.Spent`` (who, which tool, the tenant's day, tool-seconds, bytes in and out, cost) and tells the listeners
(``usage.spent``), without I/O: the snapshot carries the tenant's zone and the descriptor the tool's price.
The cost a result reports is read from ``_meta["io.mcp-host/cost"]`` (``COST_META``): a finite number >= 0, else
ignored (logged at debug). Also here: the per-tenant ``mcp_usage_*`` metrics, a listener with a bounded label.
Not here: the ledger's buffer and writes (``limits.ledger``), budgets.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Mapping
from datetime import datetime, tzinfo
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from ..conf import mcp_settings, on_reload
from ..observability import metrics
from ..protocol.context import CallContext
from ..protocol.descriptors import ToolDescriptor
from .usage import Spent, spent

logger = logging.getLogger("mcp_app.limits.usage")

#: Where a result reports what its call cost beyond the tool's price: ``result["_meta"][COST_META]``.
COST_META = "io.mcp-host/cost"
ZERO = Decimal(0)
UTC_ZONE = ZoneInfo("UTC")


@functools.lru_cache(maxsize=512)
def zone(name: str) -> tzinfo:
    """The IANA zone ``name`` (UTC for an unknown one: ``Tenant.time_zone`` is validated, this is a backstop)."""
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        logger.warning("unknown time zone %r: counting usage in UTC", name)
        return UTC_ZONE


def reported_cost(result: Mapping[str, Any] | None) -> Decimal:
    """The cost ``result`` reports in its ``_meta`` (``COST_META``), or 0 when it reports none or a bad one."""
    meta = result.get("_meta") if result is not None else None
    if meta is None:  # most results (and no ABC check for it)
        return ZERO
    value = meta.get(COST_META) if isinstance(meta, Mapping) else None
    if value is None:
        return ZERO
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        logger.debug("ignoring the cost a result reported in _meta: %r is no finite number >= 0", value)
        return ZERO
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def json_size(value: Any) -> int:
    """Bytes of ``value`` as JSON (0 when it is not JSON)."""
    try:
        return len(orjson.dumps(value, default=str))
    except TypeError:
        return 0


class Meter:
    """The ``UsageMeter`` port (see the module docstring); never raises into the runner."""

    def measured(
        self,
        tool: ToolDescriptor,
        arguments: Mapping[str, Any],
        call: CallContext,
        result: Mapping[str, Any] | None,
        *,
        failed: bool,
        seconds: float,
    ) -> None:
        ctx = call.request
        principal = ctx.principal
        if principal is None or principal.tenant_pk is None:
            return  # nobody to count it against
        try:
            usage = Spent(
                tenant_pk=principal.tenant_pk,
                agent_pk=principal.agent_pk,
                server_pk=ctx.server.pk,
                agent_key=principal.agent_id,
                server_key=ctx.server.server_id,
                tool_name=tool.name,
                day=datetime.now(zone(principal.time_zone)).date(),
                errors=1 if failed or (result is not None and result.get("isError") is True) else 0,
                tool_seconds=max(0.0, seconds),
                bytes_in=json_size(arguments),
                bytes_out=json_size(result) if result is not None else 0,
                cost=(tool.price or ZERO) + reported_cost(result),
                tenant_slug=principal.tenant,
            )
        except Exception:
            logger.exception("could not meter a call of %s", tool.name)
            return
        spent(usage)

    def __repr__(self) -> str:
        return "METER"


METER = Meter()


class TenantLabels:
    """The ``tenant`` label of the usage metrics: a tenant's slug for the first ``USAGE_METRICS_MAX_TENANTS``
    tenants this process sees, ``other`` for the rest (a bounded number of series per process)."""

    OTHER = "other"

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def label(self, slug: str) -> str:
        if slug in self._known:
            return slug
        with self._lock:
            if len(self._known) >= mcp_settings.USAGE_METRICS_MAX_TENANTS or not slug:
                return self.OTHER
            self._known.add(slug)
        return slug

    def clear(self) -> None:
        with self._lock:
            self._known.clear()


tenant_labels = TenantLabels()
on_reload(tenant_labels.clear)


def count_in_metrics(usage: Spent) -> None:
    """The ``usage.on_spent`` listener of the ``mcp_usage_*`` metrics."""
    metrics.record_usage(tenant_labels.label(usage.tenant_slug), usage.calls, usage.tool_seconds, float(usage.cost))
