"""Approvals in the admin (docs/approvals.md, "In the admin and the API"): the calls of a tenant waiting for a
person, pending ones first, each with its agent, server, tool, the exact arguments (indented JSON), why approval is
required and until when. Its page shows the decision form (Approve, Deny, an optional note) to those who may
decide: the tenant's admins and owners, never the user the calling agent acts for. A decision is a POST to
``<id>/decide/`` through ``operations.decide_approval`` (the door the API and ``mcp_approvals`` use); its outcome is
a message. Everything else is read-only; decided approvals say who decided and when.

``pending_count(request)``: the sidebar's badge, the approvals the user may see that wait now.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.db.models.expressions import OrderBy
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from .. import permissions
from ..models import Approval
from ..operations import DecisionRefused, approvals_with_status, decide_approval
from .base import TenantScopedAdmin

NOTE_MAX_LENGTH = Approval._meta.get_field("note").max_length


def _waiting_first() -> OrderBy:
    """An ordering that puts the approvals waiting now (pending and unexpired) first."""
    pending = When(status=Approval.Status.PENDING, expires_at__gt=timezone.now(), then=Value(1))
    return Case(pending, default=Value(0), output_field=IntegerField()).desc()


def pending_count(request: HttpRequest) -> int:
    """Approvals of the user's tenants waiting for a decision now (one indexed count)."""
    return permissions.scope_queryset(request.user, Approval.objects.pending()).count()


class StatusNowFilter(admin.SimpleListFilter):
    """The status as the page shows it: a request past its expiry is *Expired* before the sweep marks it."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Any:
        return Approval.Status.choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Approval]) -> QuerySet[Approval]:
        value = self.value()
        return queryset if value is None else approvals_with_status(queryset, value)


@admin.register(Approval)
class ApprovalAdmin(TenantScopedAdmin):
    read_only_model = True
    tenant_field = None
    change_form_template = "admin/mcp_app/approval/change_form.html"
    list_display = ("tool_name", "agent", "server", "status_shown", "reason", "created_at", "expires_at", "decision")
    list_filter = (
        StatusNowFilter,
        ("tenant", admin.RelatedOnlyFieldListFilter),
        ("server", admin.RelatedOnlyFieldListFilter),
        ("agent", admin.RelatedOnlyFieldListFilter),
    )
    list_select_related = ("agent__tenant", "server__tenant", "decided_by")  # their names show the tenant
    search_fields = ("tool_name", "agent__agent_id", "server__server_id", "arguments_digest")
    readonly_fields = ("arguments_shown", "status_shown", "task_shown", "decider")

    def get_fieldsets(self, request: HttpRequest, obj: Approval | None = None) -> Any:
        fieldsets: list[tuple[str, dict[str, Any]]] = [
            ("Call", {"fields": ("tenant", "server", "agent", "tool_name", "arguments_shown", "arguments_digest")}),
            ("Request", {"fields": ("reason", "status_shown", "created_at", "expires_at", "task_shown")}),
        ]
        if obj is not None and obj.decided_at is not None:
            fieldsets.append(("Decision", {"fields": ("decider", "decided_at", "note", "used_at")}))
        return fieldsets

    def get_ordering(self, request: HttpRequest) -> Any:
        return (_waiting_first(), "-created_at")  # an expression: ``ordering`` itself takes fields only

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record of who decided what: never deleted by hand (its tenant's deletion takes it)

    @admin.display(description="status", ordering="status")
    def status_shown(self, obj: Approval) -> str:
        return str(Approval.Status.EXPIRED.label if obj.is_expired else obj.get_status_display())

    @admin.display(description="decided by")
    def decider(self, obj: Approval) -> str:
        return "a deleted user" if obj.decided_by is None else str(obj.decided_by.get_username())

    @admin.display(description="decided")
    def decision(self, obj: Approval) -> str:
        if obj.decided_at is None:
            return "—"
        return f"{obj.decided_by or 'a deleted user'}, {timezone.localtime(obj.decided_at):%Y-%m-%d %H:%M}"

    @admin.display(description="arguments")
    def arguments_shown(self, obj: Approval) -> str:
        pretty = json.dumps(obj.arguments, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html('<pre class="mcp-block mcp-approval-arguments">{}</pre>', pretty)

    @admin.display(description="parked call")
    def task_shown(self, obj: Approval) -> str:
        if obj.task is None:
            return "—"
        link = reverse("admin:mcp_app_tooltask_change", args=[obj.task.pk])
        return format_html(
            '<a class="text-primary-600 underline" href="{}">{}</a> ({})',
            link,
            obj.task.task_id,
            obj.task.get_status_display(),
        )

    # -- the decision -------------------------------------------------------------------------------------------
    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(require_POST(self.decide_view))
        return [path("<path:object_id>/decide/", view, name="mcp_app_approval_decide"), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        approval = self.get_object(request, object_id)  # 404 for another tenant's
        extra = {
            "decidable": approval.status == Approval.Status.PENDING and not approval.is_expired,
            "may_decide": self.has_change_permission(request, approval),
            "own_agent": not approval.may_be_decided_by(request.user),
            "decide_url": reverse("admin:mcp_app_approval_decide", args=[approval.pk]),
            "note_max_length": NOTE_MAX_LENGTH,
        }
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **extra})

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        approval = self.get_object(request, object_id)  # 404 for another tenant's, like a missing one
        if not self.has_change_permission(request, approval):
            raise PermissionDenied
        decision = request.POST.get("decision")
        if decision not in ("approve", "deny"):
            messages.error(request, "Choose Approve or Deny.")
        else:
            note = request.POST.get("note", "").strip()[:NOTE_MAX_LENGTH]
            try:
                with transaction.atomic():  # the parked call hears the decision once it is committed
                    decide_approval(approval, user=request.user, approve=decision == "approve", note=note)
            except DecisionRefused as refused:
                messages.error(request, str(refused))
            else:
                outcome = (
                    "approved: the call runs, once" if decision == "approve" else "denied: the call ends with an error"
                )
                messages.success(request, f"{approval.tool_name} by {approval.agent.agent_id} {outcome}.")
        return HttpResponseRedirect(reverse("admin:mcp_app_approval_change", args=[approval.pk]))
