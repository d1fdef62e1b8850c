"""The audit log in the admin: a read-only, tenant-scoped list of tool calls (filters offer only the user's
tenants' choices; nobody adds, edits or deletes), and the usage page per tenant
(``…/toolcall/usage/?tenant=<pk>&days=<n>``, the dashboard's charts, and each budget's burn-down this day and
month: ``limits.burndown``). What they show: docs/audit.md, docs/budgets.md.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from .. import permissions
from ..limits.burndown import burn_down, tenant_budgets
from ..models import Agent, McpServer, Tenant, Tool, ToolCall
from . import dashboard
from .base import TenantScopedAdmin

permissions.register_tenant_path(
    ToolCall, "tenant", roles={"view": permissions.VIEWER, "add": None, "change": None, "delete": None}
)


class _ScopedFilter(admin.SimpleListFilter):
    """A list filter on the foreign key ``parameter_name`` whose choices come only from the tenants the user may
    see (``scoped_filter`` makes one per model)."""

    model: Any = None

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        scoped = permissions.scope_queryset(request.user, self.model.objects.all())
        if self.model is not Tenant:
            scoped = scoped.select_related("tenant")  # each choice names its tenant
        return [(str(obj.pk), str(obj)) for obj in scoped]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if not value.isdigit():
            return queryset.none()
        return queryset.filter(**{f"{self.parameter_name}_id": int(value)})


def scoped_filter(field: str, model: type[Any]) -> type[_ScopedFilter]:
    attributes = {"title": field, "parameter_name": field, "model": model}
    return type(f"{model.__name__}Filter", (_ScopedFilter,), attributes)


class ToolNameFilter(admin.SimpleListFilter):
    """By tool name; the choices are the names in the user's tenants' catalogs (not a scan of the log)."""

    title = "tool"
    parameter_name = "tool"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = permissions.scope_queryset(request.user, Tool.objects.all()).values_list("name", flat=True)
        return [(name, name) for name in sorted(set(names))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(tool_name=value)


@admin.register(ToolCall)
class ToolCallAdmin(TenantScopedAdmin):
    read_only_model = True
    tenant_field = None
    list_display = (
        "started_at",
        "tool_name",
        "status",
        "duration",
        "error_code",
        "upstream",
        "agent_key",
        "token_prefix",
        "server_key",
        "tenant",
        "era",
    )
    list_filter = (
        scoped_filter("tenant", Tenant),
        scoped_filter("server", McpServer),
        scoped_filter("agent", Agent),
        ToolNameFilter,
        "status",
        ("started_at", admin.DateFieldListFilter),
    )
    list_select_related = ("tenant",)
    search_fields = ("tool_name", "request_id", "token_prefix", "task_id", "=arguments_digest", "upstream")
    date_hierarchy = None  # a date filter instead: the hierarchy counts distinct dates over the whole log
    show_full_result_count = False  # no COUNT(*) over the whole log on every page
    list_per_page = 50
    ordering = ("-started_at",)
    fields = (
        "tenant",
        "server",
        "server_key",
        "agent",
        "agent_key",
        "token_prefix",
        "tool_name",
        "status",
        "error_code",
        "error_message",
        "arguments_display",
        "arguments_digest",
        *ToolCall.RUN_FIELDS,
        "upstream",
        "upstream_ms",
    )
    readonly_fields = fields
    change_list_template = "admin/mcp_app/toolcall/change_list.html"

    # Scoping, and no add page (read_only_model), come from TenantScopedAdmin; nobody changes or deletes here.
    def has_change_permission(self, request: HttpRequest, obj: ToolCall | None = None) -> bool:
        return False

    has_delete_permission = has_change_permission

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, obj: ToolCall) -> str:
        return f"{obj.duration_ms:.1f} ms"

    @admin.display(description="arguments (redacted)")
    def arguments_display(self, obj: ToolCall) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.arguments, indent=2, ensure_ascii=False, sort_keys=True))

    def get_urls(self) -> list[Any]:
        usage = path("usage/", self.admin_site.admin_view(self.usage_view), name="mcp_app_toolcall_usage")
        return [usage, *super().get_urls()]

    def usage_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        tenants = list(permissions.scope_queryset(request.user, Tenant.objects.order_by("slug")))
        tenant = _chosen_tenant(request, tenants)
        days = dashboard.chosen_days(request)
        since, now = dashboard.period(days)
        usage = ToolCall.objects.usage(tenant.pk, since, now) if tenant else None
        budgets = burn_down(tenant, tenant_budgets(tenant)) if tenant else []
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Usage of {tenant.name}" if tenant else "Usage",
            "tenants": tenants,
            "tenant": tenant,
            "days": days,
            "day_choices": dashboard.USAGE_DAYS,
            "usage": usage,
            "budgets": budgets,
            "budgets_url": reverse("admin:mcp_app_budget_changelist"),
            **(dashboard.charts(usage, since, now, limit=25) if usage else {}),
            "changelist_url": reverse("admin:mcp_app_toolcall_changelist"),
        }
        return TemplateResponse(request, "admin/mcp_app/toolcall/usage.html", context)


def _chosen_tenant(request: HttpRequest, tenants: list[Tenant]) -> Tenant | None:
    raw = request.GET.get("tenant")
    if raw is None:
        return tenants[0] if len(tenants) == 1 else None
    chosen = next((tenant for tenant in tenants if str(tenant.pk) == raw), None)
    if chosen is None:
        raise Http404("No such tenant.")  # another tenant's usage looks like no tenant at all
    return chosen
