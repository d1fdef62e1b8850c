"""Admin of what runs: handshake-era sessions and durable tool tasks. Both are read-only records; members with
the change role terminate sessions (``McpSession.terminate``) and cancel tasks (``services.cancel_task``,
which also stops the work in whichever process runs it)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path

from ..models import McpSession, ToolTask
from ..models.tasks import TERMINAL
from ..services import cancel_task
from .base import TenantScopedAdmin
from .dashboard import chosen_tenant, live_figures, running_calls


@admin.register(McpSession)
class McpSessionAdmin(TenantScopedAdmin):
    read_only_model = True
    tenant_field = None
    list_display = ("__str__", "server", "agent", "protocol_version", "created_at", "last_seen_at", "terminated_at")
    list_filter = (
        ("server__tenant", admin.RelatedOnlyFieldListFilter),
        ("server", admin.RelatedOnlyFieldListFilter),
        "protocol_version",
        ("terminated_at", admin.EmptyFieldListFilter),
    )
    list_select_related = ("server", "agent", "server__tenant")
    search_fields = ("digest", "server__server_id", "agent__agent_id")
    exclude = ("digest",)
    actions = ["terminate_sessions"]

    @admin.action(description="Terminate selected sessions", permissions=["change"])
    def terminate_sessions(self, request: HttpRequest, queryset: QuerySet[McpSession]) -> None:
        sessions = list(queryset.filter(terminated_at__isnull=True))
        for session in sessions:
            session.terminate()
        self.message_user(request, f"Terminated {len(sessions)} session(s).")


@admin.register(ToolTask)
class ToolTaskAdmin(TenantScopedAdmin):
    """Durable records of tasks and worker calls. The list starts with the calls running now (progress as the tool
    last reported it, start and elapsed time), a fragment that refreshes itself every 2 s (``running/``)."""

    read_only_model = True
    tenant_field = None
    list_display = (
        "__str__",
        "server",
        "agent",
        "status",
        "progress_display",
        "started",
        "elapsed",
        "execution",
        "finished_at",
    )
    list_filter = (
        "status",
        "execution",
        "client_task",
        ("server__tenant", admin.RelatedOnlyFieldListFilter),
        ("server", admin.RelatedOnlyFieldListFilter),
    )
    list_select_related = ("server", "agent", "server__tenant")
    search_fields = ("task_id", "tool_name", "server__server_id", "agent__agent_id", "celery_id", "idempotency_key")
    exclude = ("request_state",)
    actions = ["cancel_tasks"]
    list_before_template = "admin/mcp_app/tooltask/list_before.html"

    def get_urls(self) -> list[Any]:
        running = path("running/", self.admin_site.admin_view(self.running_view), name="mcp_app_tooltask_running")
        return [running, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        running = self.get_queryset(request).exclude(status__in=TERMINAL)
        extra = {"running": running_calls(request), "running_count": running.count()}
        return super().changelist_view(request, {**(extra_context or {}), **extra})

    def running_view(self, request: HttpRequest) -> HttpResponse:
        """The running calls fragment (the list's and the dashboard's), scoped like every page of this admin."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {**live_figures(request, chosen_tenant(request)), "cards": request.GET.get("cards") == "1"}
        return TemplateResponse(request, "admin/mcp_app/tooltask/running.html", context)

    @admin.display(description="progress")
    def progress_display(self, obj: ToolTask) -> str:
        if obj.status in TERMINAL and obj.progress is None:
            return "-"
        return render_to_string("admin/mcp_app/tooltask/progress.html", {"task": obj})

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: ToolTask) -> Any:
        return obj.started_at or obj.created_at

    @admin.display(description="elapsed")
    def elapsed(self, obj: ToolTask) -> str:
        return obj.elapsed_text

    @admin.action(description="Cancel selected tasks", permissions=["change"])
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[ToolTask]) -> None:
        cancelled = sum(1 for task in queryset.exclude(status__in=TERMINAL) if cancel_task(task))
        self.message_user(request, f"Cancelled {cancelled} task(s).")
