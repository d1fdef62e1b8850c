"""Budgets in the admin (docs/budgets.md, "Managing budgets and reading usage"): the budgets of a tenant and its
agents, the alerts recorded (read-only) and the tenant's alert webhook (its signing secret shown once, in a
message, when it is made or rotated).

Tenant admins add and edit their own budgets (``set_by`` tenant); the operator's are read-only to them
(``mcp_app.permissions.OPERATOR_ROWS``): every budget that applies holds, so they may add a tighter one, never
raise the operator's. Superusers edit everything, and their new budgets are the operator's unless they choose.
What is used of each budget now is drawn on the usage page (``admin.audit``) from ``limits.burndown``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ..limits.burndown import burn_down, figure
from ..models import Budget, BudgetAlert, BudgetAlertHook
from .base import TenantScopedAdmin

LIMIT_FIELDS = {
    "day": ("calls_per_day", "tool_seconds_per_day", "cost_per_day"),
    "month": ("calls_per_month", "tool_seconds_per_month", "cost_per_month"),
}


class BudgetForm(forms.ModelForm):
    """One budget per scope (the tenant or an agent) and author: said on the form, not by a database error."""

    class Meta:
        model = Budget
        fields = "__all__"

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        instance = self.instance

        def chosen(name: str) -> Any:
            return cleaned.get(name) if name in self.fields else getattr(instance, name, None)

        tenant, agent, set_by = chosen("tenant"), chosen("agent"), chosen("set_by") or Budget.SetBy.TENANT
        if tenant is not None:
            same = Budget.objects.filter(tenant=tenant, agent=agent, set_by=set_by).exclude(pk=instance.pk)
            if same.exists():
                whose = "The operator" if set_by == Budget.SetBy.OPERATOR else "The tenant's admins"
                scope = "this agent" if agent is not None else "the whole tenant"
                raise forms.ValidationError(f"{whose} already set a budget of {scope}: change that one.")
        return cleaned


@admin.register(Budget)
class BudgetAdmin(TenantScopedAdmin):
    form = BudgetForm
    list_display = ("scope", "tenant", "set_by", "limits_summary", "alert_percent", "updated_at")
    list_filter = ("set_by", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant", "agent")
    search_fields = ("tenant__slug", "agent__agent_id")

    def get_fieldsets(self, request: HttpRequest, obj: Budget | None = None) -> Any:
        fieldsets: list[tuple[str | None, dict[str, Any]]] = [
            (None, {"fields": ("tenant", "agent", "set_by")}),
            ("Per day", {"fields": LIMIT_FIELDS["day"], "description": "Empty: no limit. 0 allows nothing."}),
            ("Per month", {"fields": LIMIT_FIELDS["month"]}),
            ("Alert", {"fields": ("alert_percent",)}),
        ]
        if obj is not None:
            fieldsets.append(("Now", {"fields": ("used_now", "updated_at")}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Budget | None = None) -> Any:
        fields = [*super().get_readonly_fields(request, obj), "updated_at", "used_now"]
        if obj is not None:
            fields.append("agent")  # another scope is another budget
        if not request.user.is_superuser:
            fields.append("set_by")  # a tenant's admins set only their own
        return fields

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        if request.user.is_superuser:
            initial.setdefault("set_by", Budget.SetBy.OPERATOR)
        return initial

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        if not change and not request.user.is_superuser:
            obj.set_by = Budget.SetBy.TENANT
        super().save_model(request, obj, form, change)  # asks mcp_app.permissions (operator rows: superusers)

    @admin.display(description="scope", ordering="agent__agent_id")
    def scope(self, obj: Budget) -> str:
        return f"agent {obj.agent.agent_id}" if obj.agent is not None else "whole tenant"

    @admin.display(description="limits")
    def limits_summary(self, obj: Budget) -> str:
        names = {"calls": "calls", "tool_seconds": "tool-s", "cost": "cost"}
        parts = [f"{figure(value)} {names[metric]}/{period}" for (metric, period), value in obj.limits().items()]
        return ", ".join(parts) or "no limits"

    @admin.display(description="used now")
    def used_now(self, obj: Budget) -> Any:
        if obj.pk is None:
            return "-"
        (burn,) = burn_down(obj.tenant, [obj])
        lines = format_html_join(
            "",
            "<li>{} per {}: {} of {} ({}%)</li>",
            (
                (b.metric.replace("_", "-"), b.period, f"{b.used:g}", f"{b.limit:g}", round(b.percent))
                for b in burn.burns
            ),
        )
        usage = reverse("admin:mcp_app_toolcall_usage") + f"?tenant={obj.tenant_id}"
        return format_html(
            '<ul class="mcp-burn-list">{}</ul><a class="text-primary-600" href="{}">Burn-down on the usage page</a>',
            lines,
            usage,
        )


@admin.register(BudgetAlert)
class BudgetAlertAdmin(TenantScopedAdmin):
    read_only_model = True
    tenant_field = None
    list_display = ("created_at", *BudgetAlert.CROSSED, *BudgetAlert.DELIVERY)
    list_filter = ("metric", "period", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant", "budget", "budget__tenant", "budget__agent")
    ordering = ("-created_at",)

    def has_change_permission(self, request: HttpRequest, obj: BudgetAlert | None = None) -> bool:
        return False  # recorded by the budgets; nobody edits or deletes one here

    has_delete_permission = has_change_permission


@admin.register(BudgetAlertHook)
class BudgetAlertHookAdmin(TenantScopedAdmin):
    list_display = ("tenant", "url", "is_active", "updated_at")
    list_filter = ("is_active",)
    list_select_related = ("tenant",)
    search_fields = ("tenant__slug", "url")
    actions = ["rotate_secrets"]

    def get_fields(self, request: HttpRequest, obj: BudgetAlertHook | None = None) -> Any:
        shown = ("signing_secret", "updated_at") if obj is not None else ()
        return ("tenant", "url", "is_active", *shown)

    def get_readonly_fields(self, request: HttpRequest, obj: BudgetAlertHook | None = None) -> Any:
        return [*super().get_readonly_fields(request, obj), "signing_secret", "updated_at"]

    @admin.display(description="signing secret")
    def signing_secret(self, obj: BudgetAlertHook) -> str:
        return "Set: shown once, when the webhook was made or the secret rotated (action “Rotate signing secret”)."

    def save_model(self, request: HttpRequest, obj: BudgetAlertHook, form: Any, change: bool) -> None:
        raw = None if change else obj.new_signing_secret()
        super().save_model(request, obj, form, change)
        if raw is not None:
            messages.warning(request, f"Signing secret of {obj.tenant}: {raw} — copy it now; it is never shown again.")

    @admin.action(description="Rotate signing secret", permissions=["change"])
    def rotate_secrets(self, request: HttpRequest, queryset: QuerySet[BudgetAlertHook]) -> None:
        for hook in queryset.select_related("tenant"):
            raw = hook.new_signing_secret()
            hook.save(update_fields=["signing_secret_encrypted", "updated_at"])
            messages.warning(
                request, f"New signing secret of {hook.tenant}: {raw} — copy it now; it is never shown again."
            )
