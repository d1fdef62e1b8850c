"""Admin of what runs: handshake-era sessions and durable tool tasks. Both are read-only records; members with
the change role terminate sessions (``McpSession.terminate``) and cancel tasks (``services.cancel_task``,
which also stops the work in whichever process runs it)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from ..models import McpSession, ToolTask
from ..models.tasks import TERMINAL
from ..services import cancel_task
from .base import TenantScopedAdmin


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
        terminated = 0
        for session in queryset.filter(terminated_at__isnull=True):
            session.terminate()
            terminated += 1
        self.message_user(request, f"Terminated {terminated} session(s).")


@admin.register(ToolTask)
class ToolTaskAdmin(TenantScopedAdmin):
    read_only_model = True
    tenant_field = None
    list_display = (
        "__str__",
        "server",
        "agent",
        "tool_name",
        "status",
        "execution",
        "attempts",
        "created_at",
        "updated_at",
        "finished_at",
        "expires_at",
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

    @admin.action(description="Cancel selected tasks", permissions=["change"])
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[ToolTask]) -> None:
        cancelled = sum(1 for task in queryset.exclude(status__in=TERMINAL) if cancel_task(task))
        self.message_user(request, f"Cancelled {cancelled} task(s).")
