"""Admin of MCP servers, with their tool, resource and prompt bindings inline (choices: the server's tenant's
catalog, by autocomplete), and their catalog versions' pages (``admin.versions``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from unfold.admin import TabularInline
from unfold.widgets import UnfoldAdminTextareaWidget

from ..models import McpServer, ServerPrompt, ServerResource, ServerTool
from .base import TenantScopedAdmin, TenantScopedInline
from .versions import ServerVersionPages


class _BindingInline(TenantScopedInline, TabularInline):
    """A server's bindings of one kind of entry, in their order, the entry picked by autocomplete."""

    extra = 0
    ordering = ("position", "id")


class ServerToolInline(_BindingInline):
    model = ServerTool
    fields = ("position", "tool", "enabled", "name_override", "description_override", "execution", "timeout_seconds")
    autocomplete_fields = ("tool",)
    # One line per binding: the row fits a 1,366 px window without scrolling sideways.
    formfield_overrides = {models.TextField: {"widget": UnfoldAdminTextareaWidget(attrs={"rows": 1})}}


class ServerResourceInline(_BindingInline):
    model = ServerResource
    fields = ("position", "resource", "enabled")
    autocomplete_fields = ("resource",)


class ServerPromptInline(_BindingInline):
    model = ServerPrompt
    fields = ("position", "prompt", "enabled")
    autocomplete_fields = ("prompt",)


@admin.register(McpServer)
class McpServerAdmin(TenantScopedAdmin):
    list_display = ("server_id", "name", "tenant", "endpoint", "enabled", "catalog_version", "updated_at")
    list_filter = ("enabled", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("server_id", "name", "title", "tenant__slug")
    readonly_fields = ("endpoint", "published", "catalog_version", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("tenant", "server_id", "endpoint", "name", "title", "version", "enabled")}),
        ("Clients", {"fields": ("instructions", "protocol_versions", "sessions_required", "allowed_origins")}),
        ("Catalog versions", {"fields": ("review_edits", "published")}),
        ("History", {"fields": ("catalog_version", "created_at", "updated_at")}),
    )
    inlines = [ServerToolInline, ServerResourceInline, ServerPromptInline]
    change_form_template = "admin/mcp_app/change_form_links.html"

    def get_urls(self) -> list[Any]:
        return [*ServerVersionPages(self).urls(), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        links = [(reverse("admin:mcp_app_mcpserver_versions", args=[object_id]), "Catalog versions")]
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "object_links": links})

    @admin.display(description="published version")
    def published(self, obj: McpServer) -> str:
        if obj.pk is None:
            return "-"
        version = obj.published_version
        shown = f"version {version.number} ({version.short_digest})" if version else "none yet: it serves its draft"
        return format_html(
            '{} · <a class="text-primary-600" href="{}">versions, draft and diffs</a>',
            shown,
            reverse("admin:mcp_app_mcpserver_versions", args=[obj.pk]),
        )

    @admin.display(description="endpoint")
    def endpoint(self, obj: McpServer) -> str:
        if obj.pk is None:
            return "/mcp/<server id>"
        return format_html("<code>/mcp/{}?agentId=&lt;agent id&gt;</code>", obj.server_id)
