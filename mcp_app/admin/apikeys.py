"""Admin page for personal API keys: every staff user issues (``ApiKey.objects.issue_key``, the raw value shown
once) and revokes their own keys here; superusers see everyone's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from django.http import HttpRequest
from unfold.admin import ModelAdmin

from .. import operations
from ..models import ApiKey

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups


@admin.register(ApiKey)
class ApiKeyAdmin(ModelAdmin):
    list_display = ("__str__", "name", "user", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    list_select_related = ("user",)
    search_fields = ("prefix", "name")
    readonly_fields = ("user", "prefix", "created_at", "revoked_at", "last_used_at")
    actions = ["revoke_keys"]

    class Media:
        css = {"all": ("mcp_app/admin/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiKey]:
        queryset = super().get_queryset(request)
        return queryset if request.user.is_superuser else queryset.filter(user_id=request.user.pk)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> _FieldGroups:
        if obj is None:
            return ["name", "expires_at"]
        return ["name", "user", "prefix", "created_at", "expires_at", "revoked_at", "last_used_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        return (*self.readonly_fields, "expires_at")

    def _own(self, request: HttpRequest, obj: ApiKey | None) -> bool:
        user = request.user
        if not (user.is_active and user.is_staff):
            return False
        return obj is None or user.is_superuser or obj.user_id == user.pk

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._own(request, obj)

    has_change_permission = has_delete_permission = has_view_permission

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._own(request, None)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        user = request.user
        assert isinstance(user, AbstractBaseUser)  # the admin site only serves signed-in staff
        key, raw = ApiKey.objects.issue_key(user, name=obj.name, expires_at=obj.expires_at)
        obj.pk, obj.user_id = key.pk, key.user_id
        obj.prefix, obj.digest, obj.created_at = key.prefix, key.digest, key.created_at
        obj._state.adding = False
        messages.warning(request, f"New API key: {raw} — copy it now; it is never shown again.")

    @admin.action(description="Revoke selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        self.message_user(request, f"Revoked {operations.revoke(queryset)} API key(s).")
