"""Admin of a tenant's catalog (tools, resources, prompts) and of the bindings that expose entries on servers.

A Python tool is picked from the code registry, limited to what the operator allowed the user's tenants; the
model validates the choice again (registered, allowed for the tool's tenant). Schemas are checked as JSON Schema
2020-12 by the model. Every catalog entry has a "Try it" page (``mcp_app.admin.tryit``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from .. import permissions
from ..definitions.registry import registry
from ..models import Prompt, Resource, ServerPrompt, ServerResource, ServerTool, Tool
from ..models.tenancy import python_tool_allowed
from .base import TenantScopedAdmin
from .http_tools import WebhookInline
from .tryit import TryItMixin


def _allowed_python_tools(request: HttpRequest) -> list[str]:
    names = registry.names()
    if request.user.is_superuser:
        return names
    lists = list(permissions.editable_tenants(request.user).values_list("allowed_python_tools", flat=True))
    return [name for name in names if any(python_tool_allowed(allowed, name) for allowed in lists)]


@admin.register(Tool)
class ToolAdmin(TryItMixin, TenantScopedAdmin):
    list_display = ("name", "tenant", "kind", "title", "task_support", "updated_at")
    list_filter = ("kind", "task_support", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("name", "title", "description", "tenant__slug")
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("tenant", "name", "title", "description", "kind", "task_support", "icons")}),
        ("Schema", {"fields": ("input_schema", "output_schema", "annotations")}),
        ("Python tools", {"fields": ("python_name",)}),
        ("Rate limit", {"fields": ("rate_limit", "rate_burst")}),
        (
            "Static tools",
            {"fields": ("static_result", "static_error", "static_cases", "static_delay_ms", "static_progress_steps")},
        ),
        ("History", {"fields": ("created_at", "updated_at")}),
    )
    inlines = [WebhookInline]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "python_name":
            return forms.ChoiceField(
                label=db_field.verbose_name.capitalize(),
                required=False,
                choices=[("", "—"), *((name, name) for name in _allowed_python_tools(request))],
                help_text="For Python tools: the registered tool (@tool) to run; the operator decides which ones "
                "each tenant may use.",
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)


class BindingAdmin(TenantScopedAdmin):
    """A binding belongs to its server's tenant; server and entry are picked by autocomplete."""

    tenant_field = "server"
    list_select_related: ClassVar[tuple[str, ...]] = ("server", "server__tenant")
    list_filter = ("enabled", ("server__tenant", admin.RelatedOnlyFieldListFilter))


@admin.register(ServerTool)
class ServerToolAdmin(BindingAdmin):
    list_display = ("__str__", "server", "tool", "enabled", "position", "execution", "timeout_seconds")
    list_select_related = ("server", "tool", "server__tenant")
    search_fields = ("tool__name", "name_override", "server__server_id")
    autocomplete_fields = ("server", "tool")


@admin.register(Resource)
class ResourceAdmin(TryItMixin, TenantScopedAdmin):
    list_display = ("uri", "name", "tenant", "kind", "is_template", "mime_type", "updated_at")
    list_filter = ("kind", "is_template", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("uri", "name", "title", "tenant__slug")
    readonly_fields = ("created_at", "updated_at")


@admin.register(Prompt)
class PromptAdmin(TryItMixin, TenantScopedAdmin):
    list_display = ("name", "tenant", "kind", "title", "updated_at")
    list_filter = ("kind", ("tenant", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("tenant",)
    search_fields = ("name", "title", "description", "tenant__slug")
    readonly_fields = ("created_at", "updated_at")


@admin.register(ServerResource)
class ServerResourceAdmin(BindingAdmin):
    list_display = ("__str__", "server", "resource", "enabled", "position")
    list_select_related = ("server", "resource", "server__tenant")
    search_fields = ("resource__uri", "resource__name", "server__server_id")
    autocomplete_fields = ("server", "resource")


@admin.register(ServerPrompt)
class ServerPromptAdmin(BindingAdmin):
    list_display = ("__str__", "server", "prompt", "enabled", "position")
    list_select_related = ("server", "prompt", "server__tenant")
    search_fields = ("prompt__name", "server__server_id")
    autocomplete_fields = ("server", "prompt")
