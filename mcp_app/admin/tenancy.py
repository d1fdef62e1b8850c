"""Admin of tenants and memberships: owners rename tenants and manage memberships (by username, typed, so an
owner never browses the site's users); only superusers create, delete, (de)activate tenants and set the
operator's fields (``OPERATOR_FIELDS``). A tenant keeps at least one owner.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.http import HttpRequest
from unfold.admin import TabularInline

from .. import permissions
from ..models import Tenant, TenantMembership
from . import quotas
from .base import TenantScopedAdmin, TenantScopedInline

OPERATOR_FIELDS = (
    "slug",
    "is_active",
    "allowed_python_tools",
    "max_worker_calls",
    "rate_limit",
    "rate_burst",
    "time_zone",
)


class UsernameField(forms.ModelChoiceField):
    """A user given by username in a text box."""

    def __init__(self, **kwargs: Any) -> None:
        user_model = get_user_model()
        kwargs.setdefault("help_text", "The username of the person to add.")
        super().__init__(
            queryset=user_model._default_manager.filter(is_active=True),
            to_field_name=user_model.USERNAME_FIELD,
            widget=forms.TextInput,
            error_messages={"invalid_choice": "No active user with this username."},
            **kwargs,
        )


class MembershipForm(forms.ModelForm):
    user = UsernameField(label="User")

    class Meta:
        model = TenantMembership
        fields = ("tenant", "user", "role")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "user" in self.fields and self.instance.user_id is not None:
            # A ModelForm's initial is the foreign key's pk; the box shows (and gets back) the username.
            self.initial["user"] = self.instance.user.get_username()


class MembershipFormSet(forms.BaseInlineFormSet):
    """The tenant's memberships as edited together: a tenant that had an owner keeps one."""

    def clean(self) -> None:
        super().clean()
        if not TenantMembership.objects.owners_left(self.instance.pk):
            return
        edited = [form.instance.pk for form in self.initial_forms if form.instance.pk is not None]
        owners = TenantMembership.objects.owners_left(self.instance.pk, without=edited)  # rows not in the form
        rows = [getattr(form, "cleaned_data", None) or {} for form in self.forms]
        owners += sum(1 for row in rows if not row.get("DELETE") and row.get("role") == TenantMembership.Role.OWNER)
        if owners == 0:
            raise forms.ValidationError("A tenant keeps at least one owner: make someone else owner first.")


class TenantMembershipInline(TenantScopedInline, TabularInline):
    model = TenantMembership
    form = MembershipForm
    formset = MembershipFormSet
    fields = ("user", "role", "created_at")
    readonly_fields = ("created_at",)
    extra = 0

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).select_related("user")  # each row shows its username


@admin.register(Tenant)
class TenantAdmin(quotas.RunningWorkerCalls, TenantScopedAdmin):
    quota_scope = quotas.TENANT
    tenant_field = None
    list_display = ("slug", "name", "is_active", "running_worker_calls", "created_at")
    list_filter = ("is_active",)
    search_fields = ("slug", "name")
    inlines = [TenantMembershipInline]
    edited_fields = ("slug", "name", *OPERATOR_FIELDS[1:])

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> Any:
        fields = ["created_at", "running_worker_calls"]
        if not request.user.is_superuser:
            fields += OPERATOR_FIELDS
        return fields

    def get_prepopulated_fields(self, request: HttpRequest, obj: Tenant | None = None) -> dict[str, Any]:
        return {"slug": ("name",)} if obj is None and request.user.is_superuser else {}


@admin.register(TenantMembership)
class TenantMembershipAdmin(TenantScopedAdmin):
    form = MembershipForm
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("user", "tenant")
    search_fields = ("user__username", "user__email", "tenant__slug")

    def get_readonly_fields(self, request: HttpRequest, obj: TenantMembership | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and "user" not in fields:
            fields.append("user")  # a membership is one person's; another person gets their own
        return fields

    def has_delete_permission(self, request: HttpRequest, obj: TenantMembership | None = None) -> bool:
        if (
            obj is not None
            and obj.role == TenantMembership.Role.OWNER
            and not request.user.is_superuser
            and not TenantMembership.objects.owners_left(obj.tenant_id, without=[obj.pk])
        ):
            return False  # the last owner stays (the operator may still remove them)
        return super().has_delete_permission(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        # The bulk action: never the tenant's last owners (superusers excepted).
        owners_left = TenantMembership.objects.owners_left
        if not request.user.is_superuser:
            for tenant_id in set(queryset.values_list("tenant_id", flat=True)):
                chosen = list(queryset.filter(tenant_id=tenant_id).values_list("pk", flat=True))
                if owners_left(tenant_id) and not owners_left(tenant_id, without=chosen):
                    queryset = queryset.exclude(tenant_id=tenant_id, role=TenantMembership.Role.OWNER)
                    self.message_user(request, "The last owner of a tenant stays.", level="warning")
        super().delete_queryset(request, queryset)

    def save_model(self, request: HttpRequest, obj: TenantMembership, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        permissions.forget(request.user)
