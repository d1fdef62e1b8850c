"""Admin of MCP servers, with their tool, resource and prompt bindings inline (choices: the server's tenant's
catalog, by autocomplete)."""

from __future__ import annotations

from django.contrib import admin
from django.db import models
from django.utils.html import format_html
from unfold.admin import TabularInline
from unfold.widgets import UnfoldAdminTextareaWidget

from ..models import McpServer, ServerPrompt, ServerResource, ServerTool
from .base import TenantScopedAdmin, TenantScopedInline


class ServerToolInline(TenantScopedInline, TabularInline):
    model = ServerTool
    extra = 0
    fields = ("position", "tool", "enabled", "name_override", "description_override", "execution", "timeout_seconds")
    autocomplete_fields = ("tool",)
    ordering = ("position", "id")
    # One line per binding: the row fits a 1,366 px window without scrolling sideways.
    formfield_overrides = {models.TextField: {"widget": UnfoldAdminTextareaWidget(attrs={"rows": 1})}}


class ServerResourceInline(TenantScopedInline, TabularInline):
    model = ServerResource
    extra = 0
    fields = ("position", "resource", "enabled")
    autocomplete_fields = ("resource",)
    ordering = ("position", "id")


class ServerPromptInline(TenantScopedInline, TabularInline):
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
