"""Admin of MCP servers, with their tool, resource and prompt bindings inline (choices: the server's tenant's
catalog, by autocomplete)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from ..models import McpServer, ServerPrompt, ServerResource, ServerTool
from .base import TenantScopedAdmin, TenantScopedInline


class ServerToolInline(TenantScopedInline, admin.TabularInline):
    model = ServerTool
    extra = 0
    fields = ("position", "tool", "enabled", "name_override", "description_override", "execution", "timeout_seconds")
    autocomplete_fields = ("tool",)
    ordering = ("position", "id")


class ServerResourceInline(TenantScopedInline, admin.TabularInline):
    model = ServerResource
    extra = 0
    fields = ("position", "resource", "enabled")
    autocomplete_fields = ("resource",)
    ordering = ("position", "id")


class ServerPromptInline(TenantScopedInline, admin.TabularInline):
    model = ServerPrompt
    extra = 0
    fields = ("position", "prompt", "enabled")
    autocomplete_fields = ("prompt",)
    ordering = ("position", "id")


@admin.register(McpServer)
class McpServerAdmin(TenantScopedAdmin):
    list_display = ("server_id", "name", "tenant", "endpoint", "enabled", "catalog_version", "updated_at")
    list_filter = ("enabled", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("server_id", "name", "title", "tenant__slug")
    readonly_fields = ("endpoint", "catalog_version", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("tenant", "server_id", "endpoint", "name", "title", "version", "enabled")}),
        ("Clients", {"fields": ("instructions", "protocol_versions", "sessions_required", "allowed_origins")}),
        ("History", {"fields": ("catalog_version", "created_at", "updated_at")}),
    )
    inlines = [ServerToolInline, ServerResourceInline, ServerPromptInline]

    @admin.display(description="endpoint")
    def endpoint(self, obj: McpServer) -> str:
        if obj.pk is None:
            return "/mcp/<server id>"
        return format_html("<code>/mcp/{}?agentId=&lt;agent id&gt;</code>", obj.server_id)
