"""The usage ledger in the admin (docs/budgets.md, "Reading usage"; docs/admin.md): ``UsageDay`` rows, read-only
and tenant-scoped like every other page, filtered by day, tenant, agent, server and tool; and "Download CSV",
which exports exactly the rows of the filtered list (the changelist's own queryset, so its filters, search and
scope) through ``limits.export``, streamed, as ``usage-<tenant slug or all>-<date>.csv``.

Rows come from the usage flusher only: nobody adds, edits or deletes one here, the operator included.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBadRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import path, reverse
from django.utils import timezone

from .. import permissions
from ..limits import export
from ..models import Tenant, UsageDay
from .audit import scoped_filter
from .base import TenantScopedAdmin

TENANT_PARAMETER = "tenant"  # audit.scoped_filter's, as on the audit log and the usage page


@admin.register(UsageDay)
class UsageDayAdmin(TenantScopedAdmin):
    read_only_model = True
    tenant_field = None
    list_display = (
        "day_shown",
        "tenant_shown",
        "agent_key",
        "server_key",
        "tool_name",
        "calls",
        "errors",
        "seconds",
        "bytes_in",
        "bytes_out",
        "cost_shown",
    )
    list_filter = (scoped_filter("tenant", Tenant), "agent_key", "server_key", "tool_name")
    list_select_related = ("tenant",)
    search_fields = ("tool_name", "agent_key")
    date_hierarchy = "day"
    list_per_page = 100
    ordering = ("-day",)  # one sort mark; the CSV has its own stable order (limits.export.ordered)
    change_list_template = "admin/mcp_app/usageday/change_list.html"

    def has_change_permission(self, request: HttpRequest, obj: UsageDay | None = None) -> bool:
        return False  # written by the usage flusher only

    has_delete_permission = has_change_permission

    @admin.display(description="day", ordering="day")
    def day_shown(self, obj: UsageDay) -> str:
        return obj.day.isoformat()  # as in the CSV, and narrow enough for eleven columns at 1,366 px

    @admin.display(description="tenant", ordering="tenant__slug")
    def tenant_shown(self, obj: UsageDay) -> str:
        return obj.tenant.slug

    @admin.display(description="tool-seconds", ordering="tool_seconds")
    def seconds(self, obj: UsageDay) -> str:
        return f"{obj.tool_seconds:.1f}"

    @admin.display(description="cost", ordering="cost")
    def cost_shown(self, obj: UsageDay) -> str:
        return _plain(obj.cost)

    # -- the CSV of the filtered list -----------------------------------------------------------------------------
    def get_urls(self) -> list[Any]:
        csv = path("export.csv", self.admin_site.admin_view(self.export_view), name="mcp_app_usageday_export")
        return [csv, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        query = urlencode(list(request.GET.lists()), doseq=True)
        export_url = reverse("admin:mcp_app_usageday_export") + (f"?{query}" if query else "")
        return super().changelist_view(
            request, {"title": "Usage ledger", **(extra_context or {}), "export_url": export_url}
        )

    def export_view(self, request: HttpRequest) -> HttpResponseBase:
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("These filters do not apply to the usage ledger.")
        rows = export.ordered(changelist.get_queryset(request)).iterator(chunk_size=2000)
        response = StreamingHttpResponse(
            export.csv_lines(export.record(row) for row in rows), content_type="text/csv; charset=utf-8"
        )
        name = f"usage-{_tenant_part(request)}-{timezone.localdate().isoformat()}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


def _plain(value: Any) -> str:
    """A decimal without trailing zeros and never in exponent form (``0.001200`` → ``0.0012``)."""
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _tenant_part(request: HttpRequest) -> str:
    """The slug of the one tenant the export covers (filtered to, or the only one the user sees), else ``all``."""
    tenants = permissions.scope_queryset(request.user, Tenant.objects.all())
    chosen = request.GET.get(TENANT_PARAMETER)
    if chosen is not None:
        tenants = tenants.filter(pk=chosen) if chosen.isdigit() else tenants.none()
    slugs = list(tenants.values_list("slug", flat=True)[:2])
    return slugs[0] if len(slugs) == 1 else "all"
