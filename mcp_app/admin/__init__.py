"""The Django admin as the operators' control panel (superuser view; tenant-scoped staff views come later).

Tokens are created here through ``AgentToken.objects.issue_token``: the raw value is shown once in a message and
never stored. Digests are read-only, revocation is an action, and every list answers the questions operators
ask (which server exposes what, which tokens are live, when were they last used).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..models import (
    Agent,
    AgentToken,
    McpServer,
    Prompt,
    Resource,
    ServerPrompt,
    ServerResource,
    ServerTool,
    Tenant,
    TenantMembership,
    Tool,
)


class TenantMembershipInline(admin.TabularInline):
    model = TenantMembership
    extra = 0
    raw_id_fields = ("user",)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "is_active", "created_at")
    list_filter = ("is_active",)
    search_fields = ("slug", "name")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [TenantMembershipInline]


@admin.register(TenantMembership)
class TenantMembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    list_select_related = ("user", "tenant")
    search_fields = ("user__username", "user__email", "tenant__slug")
    raw_id_fields = ("user", "tenant")


class ServerToolInline(admin.TabularInline):
    model = ServerTool
    extra = 0
    fields = ("position", "tool", "enabled", "name_override", "description_override")
    raw_id_fields = ("tool",)
    ordering = ("position", "id")


class ServerResourceInline(admin.TabularInline):
    model = ServerResource
    extra = 0
    fields = ("position", "resource", "enabled")
    raw_id_fields = ("resource",)
    ordering = ("position", "id")


class ServerPromptInline(admin.TabularInline):
    model = ServerPrompt
    extra = 0
    fields = ("position", "prompt", "enabled")
    raw_id_fields = ("prompt",)
    ordering = ("position", "id")


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ("server_id", "name", "tenant", "enabled", "catalog_version", "updated_at")
    list_filter = ("enabled", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("server_id", "name", "title", "tenant__slug")
    readonly_fields = ("catalog_version", "created_at", "updated_at")
    raw_id_fields = ("tenant",)
    inlines = [ServerToolInline, ServerResourceInline, ServerPromptInline]


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "kind", "title", "updated_at")
    list_filter = ("kind", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("name", "title", "description", "tenant__slug")
    raw_id_fields = ("tenant",)
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("tenant", "name", "title", "description", "kind", "icons")}),
        ("Schema", {"fields": ("input_schema", "output_schema", "annotations")}),
        ("Python tools", {"fields": ("python_name",)}),
        (
            "Static tools",
            {"fields": ("static_result", "static_error", "static_cases", "static_delay_ms", "static_progress_steps")},
        ),
        ("History", {"fields": ("created_at", "updated_at")}),
    )


@admin.register(ServerTool)
class ServerToolAdmin(admin.ModelAdmin):
    list_display = ("__str__", "server", "tool", "enabled", "position")
    list_filter = ("enabled", "server__tenant")
    list_select_related = ("server", "tool", "server__tenant")
    search_fields = ("tool__name", "name_override", "server__server_id")
    raw_id_fields = ("server", "tool")


@admin.register(Resource)
class ResourceAdmin(admin.ModelAdmin):
    list_display = ("uri", "name", "tenant", "kind", "is_template", "mime_type", "updated_at")
    list_filter = ("kind", "is_template", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("uri", "name", "title", "tenant__slug")
    raw_id_fields = ("tenant",)
    readonly_fields = ("created_at", "updated_at")


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "kind", "title", "updated_at")
    list_filter = ("kind", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("name", "title", "description", "tenant__slug")
    raw_id_fields = ("tenant",)
    readonly_fields = ("created_at", "updated_at")


@admin.register(ServerResource)
class ServerResourceAdmin(admin.ModelAdmin):
    list_display = ("__str__", "server", "resource", "enabled", "position")
    list_filter = ("enabled", "server__tenant")
    list_select_related = ("server", "resource", "server__tenant")
    raw_id_fields = ("server", "resource")


@admin.register(ServerPrompt)
class ServerPromptAdmin(admin.ModelAdmin):
    list_display = ("__str__", "server", "prompt", "enabled", "position")
    list_filter = ("enabled", "server__tenant")
    list_select_related = ("server", "prompt", "server__tenant")
    raw_id_fields = ("server", "prompt")


class AgentTokenInline(admin.TabularInline):
    model = AgentToken
    extra = 0
    can_delete = False
    fields = ("prefix", "name", "created_at", "expires_at", "revoked_at", "last_used_at")
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("agent_id", "name", "tenant", "is_active", "created_at")
    list_filter = ("is_active", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("agent_id", "name", "tenant__slug")
    raw_id_fields = ("tenant",)
    inlines = [AgentTokenInline]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ("__str__", "name", "agent", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_filter = ("agent__tenant", ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("agent", "agent__tenant")
    search_fields = ("prefix", "name", "agent__agent_id")
    raw_id_fields = ("agent",)
    filter_horizontal = ("servers",)
    readonly_fields = ("prefix", "digest", "created_at", "revoked_at", "last_used_at")
    actions = ["revoke_tokens"]

    def get_fields(self, request: HttpRequest, obj: AgentToken | None = None) -> list[str]:
        if obj is None:
            return ["agent", "name", "servers", "expires_at"]
        return [
            "agent",
            "name",
            "servers",
            "expires_at",
            "prefix",
            "digest",
            "created_at",
            "revoked_at",
            "last_used_at",
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: AgentToken | None = None) -> tuple[str, ...]:
        if obj is None:
            return ()
        return ("agent", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: AgentToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = AgentToken.objects.issue_token(obj.agent, name=obj.name, expires_at=obj.expires_at)
        obj.pk = token.pk
        obj.prefix, obj.digest, obj.created_at = token.prefix, token.digest, token.created_at
        obj._state.adding = False
        messages.warning(request, f"New token for {obj.agent.agent_id}: {raw} — copy it now; it is never shown again.")

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        foreign = form.instance.servers.exclude(tenant_id=form.instance.agent.tenant_id)
        if foreign.exists():
            form.instance.servers.remove(*foreign)
            messages.error(request, "Servers of other tenants were removed from the token's scope.")

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


from . import apikeys  # noqa: E402, F401  (personal API keys: their own module)
