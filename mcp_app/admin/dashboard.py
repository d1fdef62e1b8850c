"""The admin index as a dashboard (unfold's ``DASHBOARD_CALLBACK``), and the charts it shares with the usage page:
calls and errors per day, p50/p95 per tool, top agents, the calls running now and open sessions (``live_figures``,
refreshed every 2 s), scoped to what the user may see. Design: docs/admin.md ("The dashboard").

Not owned here: the figures' SQL (``mcp_app.models.audit``), who may see what (``mcp_app.permissions``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from .. import permissions
from ..conf import mcp_settings
from ..models import McpSession, Tenant, ToolCall, ToolTask
from ..models.audit import ERROR_STATUSES, Usage
from ..models.tasks import TERMINAL

USAGE_DAYS = (7, 30, 90)
DEFAULT_DAYS = 30
TOP_AGENTS = 10
RUNNING_SHOWN = 20
_PRIMARY = "var(--color-primary-600)"
_PRIMARY_LIGHT = "var(--color-primary-300)"
_ERROR = "#dc2626"


# -------------------------------------------------------------------------------------------- chart data (JSON)


def _options(*, stacked: bool = False, horizontal: bool = False, unit: str = "") -> dict[str, Any]:
    value_axis: dict[str, Any] = {"beginAtZero": True, "grid": {"color": "rgba(156,163,175,0.2)"}}
    if unit:
        value_axis["title"] = {"display": True, "text": unit}
    category_axis: dict[str, Any] = {"grid": {"display": False}, "ticks": {"autoSkip": True, "maxRotation": 0}}
    if stacked:
        value_axis["stacked"] = category_axis["stacked"] = True
    return {
        "animation": False,
        "responsive": True,
        "maintainAspectRatio": False,
        "indexAxis": "y" if horizontal else "x",
        "plugins": {
            "legend": {"display": True, "position": "top", "align": "end", "labels": {"usePointStyle": True}},
            "tooltip": {"enabled": True},
        },
        "scales": {"x": value_axis, "y": category_axis} if horizontal else {"x": category_axis, "y": value_axis},
    }


def _chart(labels: list[str], series: list[tuple[str, list[Any], str]], options: dict[str, Any]) -> dict[str, str]:
    """What unfold's chart component takes: Chart.js data with one dataset per (label, values, colour)."""
    datasets = [{"label": label, "data": values, "backgroundColor": colour} for label, values, colour in series]
    return {"data": json.dumps({"labels": labels, "datasets": datasets}), "options": json.dumps(options)}


def charts(usage: Usage, since: datetime, until: datetime, limit: int) -> dict[str, Any]:
    """The charts of the dashboard and the usage page: stacked bars per day of the period (successful calls,
    errors), and horizontal bars of the busiest ``limit`` tools' p50 and p95 duration (ms), with its height."""
    days, tools = usage.every_day(since, until), usage.tools[:limit]
    per_day = [
        ("calls without error", [day.calls - day.errors for day in days], _PRIMARY),
        ("errors", [day.errors for day in days], _ERROR),
    ]
    per_tool = [
        ("p50 (ms)", [round(tool.p50_ms or 0.0, 1) for tool in tools], _PRIMARY),
        ("p95 (ms)", [round(tool.p95_ms or 0.0, 1) for tool in tools], _PRIMARY_LIGHT),
    ]
    return {
        "calls_chart": _chart([day.day.isoformat() for day in days], per_day, _options(stacked=True)),
        "durations_chart": _chart([tool.tool_name for tool in tools], per_tool, _options(horizontal=True, unit="ms")),
        "durations_height": max(160, 60 + 34 * len(tools)),
    }


# ------------------------------------------------------------------------------------------------- the figures


def chosen_days(request: HttpRequest) -> int:
    raw = request.GET.get("days", "")
    return int(raw) if raw.isdigit() and int(raw) in USAGE_DAYS else DEFAULT_DAYS


def period(days: int) -> tuple[datetime, datetime]:
    """The last ``days`` UTC days, today's included: from the first one's midnight to now."""
    now = timezone.now()
    return (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0), now


def _scope(request: HttpRequest) -> tuple[list[Tenant], Tenant | None, int | list[int] | None]:
    """The tenants the user may see, the one chosen (``?tenant=``; another tenant's pk is ignored), and what
    ``ToolCall.objects.usage`` takes: one id, the user's ids, or ``None`` for an operator's every tenant."""
    tenants = list(permissions.scope_queryset(request.user, Tenant.objects.order_by("slug")))
    raw = request.GET.get("tenant", "")
    chosen = next((tenant for tenant in tenants if str(tenant.pk) == raw), None)
    if chosen is not None:
        return tenants, chosen, chosen.pk
    if request.user.is_superuser:
        return tenants, None, None
    return tenants, None, [tenant.pk for tenant in tenants]


def _scoped(request: HttpRequest, queryset: Any, chosen: Tenant | None) -> Any:
    queryset = permissions.scope_queryset(request.user, queryset)
    return queryset if chosen is None else permissions.in_tenant(queryset, chosen.pk)


def running_calls(request: HttpRequest, chosen: Tenant | None = None, limit: int = RUNNING_SHOWN) -> list[ToolTask]:
    """The user's tenants' calls that run now (not finished), oldest first."""
    queryset = _scoped(request, ToolTask.objects.exclude(status__in=TERMINAL), chosen)
    return list(queryset.select_related("server", "agent", "server__tenant").order_by("created_at")[:limit])


def chosen_tenant(request: HttpRequest) -> Tenant | None:
    """The tenant ``?tenant=`` picks among those the user may see (``None``: all of them)."""
    return _scope(request)[1]


def live_figures(request: HttpRequest, chosen: Tenant | None = None) -> dict[str, Any]:
    """What changes from one second to the next (running calls, their count, open sessions and, for operators,
    SSE streams): for the dashboard's first render and its 2 s refresh alike, so cards and table agree."""
    running = _scoped(request, ToolTask.objects.exclude(status__in=TERMINAL), chosen)
    idle = timedelta(seconds=float(mcp_settings.SESSION_IDLE_SECONDS))
    sessions = _scoped(
        request, McpSession.objects.filter(terminated_at__isnull=True, last_seen_at__gt=timezone.now() - idle), chosen
    )
    return {
        "running": running_calls(request, chosen),
        "running_count": running.count(),
        "sessions_open": sessions.count(),
        "streams_open": _open_streams() if request.user.is_superuser else None,
        "operator": bool(request.user.is_superuser),
        "running_tenant": chosen.pk if chosen is not None else None,
    }


def dashboard(request: HttpRequest) -> dict[str, Any]:
    """Everything the dashboard draws, scoped to what ``request.user`` may see."""
    tenants, chosen, usage_scope = _scope(request)
    days = chosen_days(request)
    since, now = period(days)
    usage = ToolCall.objects.usage(usage_scope, since, now)
    every_day = usage.every_day(since, now)
    calls = sum(day.calls for day in every_day)
    errors = sum(day.errors for day in every_day)

    agents = (
        _scoped(request, ToolCall.objects.filter(started_at__gte=since, started_at__lt=now), chosen)
        .values("agent_key", "tenant__slug")
        .annotate(calls=Count("id"), errors=Count("id", filter=Q(status__in=ERROR_STATUSES)))
        .order_by("-calls", "agent_key")[:TOP_AGENTS]
    )
    return {
        "tenants": tenants,
        "tenant": chosen,
        "days": days,
        "day_choices": USAGE_DAYS,
        "since": since.date(),
        "calls": calls,
        "errors": errors,
        "error_rate": (errors / calls) if calls else 0.0,
        "tools": usage.tools,
        **charts(usage, since, now, limit=15),
        "agents": list(agents),
        **live_figures(request, chosen),
        "tasks_url": reverse("admin:mcp_app_tooltask_changelist"),
        "calls_url": reverse("admin:mcp_app_toolcall_changelist"),
        "usage_url": reverse("admin:mcp_app_toolcall_usage"),
    }


def _open_streams() -> int | None:
    """SSE responses open across the deployment (the ``mcp_sse_streams`` gauge), ``None`` when unreadable."""
    from ..observability.metrics import open_streams

    try:
        return open_streams()
    except Exception:  # a metrics directory that cannot be read: the dashboard still renders
        return None


def dashboard_callback(request: HttpRequest, context: dict[str, Any]) -> dict[str, Any]:
    """Unfold's hook for the index page: adds ``mcp_dashboard`` for users who may see tool calls."""
    if permissions.has_model_permission(request.user, "view", ToolCall):
        context["mcp_dashboard"] = dashboard(request)
    return context
